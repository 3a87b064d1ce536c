"""Recorded traces for ``check``, ``report`` and ``suggest``: files in OTLP/JSON or Jaeger JSON, or a live Jaeger.

The format of a file is recognised from its content. A file whose first line is a whole
JSON object is read as JSON lines (the Collector's file exporter writes one
``ExportTraceServiceRequest`` per line); anything else must be one JSON document.
Everything is read and checked before anything is judged, so a bad line fails the
command instead of producing a partial result.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from latency_budget._replay import SpanRecord

from ._errors import TraceInputError
from ._spans import ParsedSpan, resolve_remote_parents
from .jaeger import is_jaeger, spans_from_jaeger
from .jaeger_query import fetch_jaeger, parse_duration
from .otlp import is_otlp, spans_from_otlp

__all__ = ["TraceInputError", "TraceSet", "fetch_jaeger", "parse_duration", "read_jaeger", "read_trace_files"]

_UNKNOWN_FORMAT = (
    "unknown trace format: expected OTLP JSON (objects with 'resourceSpans', one per line, as the Collector's "
    "file exporter writes) or Jaeger JSON (an object with 'data', from Jaeger's /api/traces)"
)


@dataclass(frozen=True, slots=True)
class TraceSet:
    """The spans read from all sources, and a description of those sources for people."""

    spans: list[SpanRecord]
    sources: tuple[str, ...]

    @property
    def source_label(self) -> str:
        """``traces.jsonl``, ``3 files`` or the Jaeger URL."""
        return self.sources[0] if len(self.sources) == 1 else f"{len(self.sources)} files"

    @property
    def trace_count(self) -> int:
        """Distinct trace ids among the spans."""
        return len({span.trace_id for span in self.spans})


def read_trace_files(paths: Sequence[str]) -> TraceSet:
    """Read and parse every file (``-`` is standard input; ``.gz`` files are decompressed)."""
    parsed: list[ParsedSpan] = []
    for path in paths:
        name = "<stdin>" if path == "-" else path
        parsed.extend(_parse_text(_read(path), name))
    return TraceSet(resolve_remote_parents(parsed), tuple("<stdin>" if p == "-" else p for p in paths))


def read_jaeger(url: str, service: str, lookback: str, *, limit: int, timeout_s: float) -> TraceSet:
    """Search a Jaeger query service for ``service``'s traces of the last ``lookback``."""
    try:
        seconds = parse_duration(lookback)
    except ValueError as exc:
        raise TraceInputError(f"--lookback: {exc}") from None
    document = fetch_jaeger(url, service, seconds, limit=limit, timeout_s=timeout_s)
    label = f"{url.rstrip('/')} (service {service}, last {lookback})"
    return TraceSet(resolve_remote_parents(spans_from_jaeger(document, url)), (label,))


def _read(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        elif path.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = Path(path).read_bytes()
    except OSError as exc:  # includes gzip.BadGzipFile
        reason = exc.strerror or str(exc)
        raise TraceInputError(f"{path}: cannot read: {reason}") from None
    except EOFError:
        raise TraceInputError(f"{path}: cannot read: the compressed file is truncated") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceInputError(f"{path}: not UTF-8 text (byte {exc.start}); expected OTLP JSON or Jaeger JSON") from None


def _parse_text(text: str, name: str) -> list[ParsedSpan]:
    found: list[ParsedSpan] = []
    for where, document in _documents(text, name):
        if is_otlp(document):
            found.extend(spans_from_otlp(document, where))  # type: ignore[arg-type]
        elif is_jaeger(document):
            found.extend(spans_from_jaeger(document, where))  # type: ignore[arg-type]
        else:
            raise TraceInputError(f"{where}: {_UNKNOWN_FORMAT}")
    return found


def _documents(text: str, name: str) -> Iterator[tuple[str, object]]:
    """``(where, document)`` pairs: one per non-blank line of JSON lines, or the whole document."""
    lines = text.splitlines()
    first = next((n for n, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise TraceInputError(f"{name}: the file is empty")
    try:
        head = json.loads(lines[first])
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict):
        for number, line in enumerate(lines[first:], start=first + 1):
            if line.strip():
                yield f"{name}:{number}", _loads(line, f"{name}:{number}", line_mode=True)
        return
    yield name, _loads(text, name, line_mode=False)


def _loads(text: str, where: str, *, line_mode: bool) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        place = where if line_mode else f"{where}:{exc.lineno}"
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            what = "line" if line_mode else "file"
            raise TraceInputError(f"{place}: truncated JSON (the {what} ends in the middle of a value)") from None
        raise TraceInputError(f"{place}: invalid JSON: {exc.msg} at column {exc.colno}") from None
