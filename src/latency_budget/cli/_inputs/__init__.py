"""Recorded traces for ``check``, ``report`` and ``suggest``: files in OTLP/JSON or Jaeger JSON, or a live Jaeger.

The format of a file is recognised from its content. A file whose first line is a whole
JSON object is read as JSON lines (the Collector's file exporter writes one
``ExportTraceServiceRequest`` per line); anything else must be one JSON document.
Gzip input is recognised by its magic bytes and decompressed. Files are read line by
line (:func:`parse_trace_files`), so that ``check``, ``report`` and ``suggest`` can judge
trace by trace as they read (:class:`TraceWindow`); they print only at the end, so a bad
line still fails the command instead of producing a partial result. Every input is
bounded by :class:`InputLimits`.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import json
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from latency_budget._replay import SpanRecord

from ._errors import TraceInputError
from ._foreign import RECORD_HINT, first_value, foreign_format
from ._limits import MAX_JSON_DEPTH, STREAMED_MAX_SPANS, InputLimits, load_json, parse_size
from ._spans import ParsedSpan, Repairs, assemble
from ._window import TraceWindow
from .jaeger import is_jaeger, spans_from_jaeger
from .jaeger_query import fetch_jaeger, parse_duration
from .otlp import LogEvent, SharedStrings, is_otlp, is_otlp_logs, log_events_from_otlp, spans_from_otlp

__all__ = [
    "MAX_JSON_DEPTH",
    "STREAMED_MAX_SPANS",
    "InputLimits",
    "LogEvent",
    "Repairs",
    "TraceInputError",
    "TraceSet",
    "TraceWindow",
    "fetch_jaeger",
    "parse_duration",
    "parse_size",
    "parse_trace_files",
    "read_jaeger",
    "read_log_files",
    "read_trace_files",
    "source_names",
]

_UNKNOWN_FORMAT = (
    "unknown trace format: expected OTLP JSON (objects with 'resourceSpans', one per line, as the Collector's "
    "file exporter writes) or Jaeger JSON (an object with 'data', from Jaeger's /api/traces)"
)
_NOT_LOGS = (
    "expected OTLP JSON logs (objects with 'resourceLogs', one per line, as the Collector's file exporter writes them)"
)
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class TraceSet:
    """The spans read from all sources, a description of those sources for people, and what was repaired."""

    spans: list[SpanRecord]
    sources: tuple[str, ...]
    repairs: Repairs = field(default_factory=Repairs)
    counts: tuple[int, int] | None = None
    """(spans, distinct trace ids) read, when ``spans`` holds only some of them (a streamed read)."""
    late_spans: int = 0
    """Spans of a trace read after it had been judged (a streamed read whose window was too short)."""

    @property
    def source_label(self) -> str:
        """``traces.jsonl``, ``3 files`` or the Jaeger URL."""
        return self.sources[0] if len(self.sources) == 1 else f"{len(self.sources)} files"

    @property
    def span_count(self) -> int:
        """Spans read (after leaving out duplicates)."""
        return self.counts[0] if self.counts is not None else len(self.spans)

    @property
    def trace_count(self) -> int:
        """Distinct trace ids among the spans read."""
        return self.counts[1] if self.counts is not None else len({span.trace_id for span in self.spans})


def read_trace_files(paths: Sequence[str], limits: InputLimits | None = None) -> TraceSet:
    """Read and parse every file (``-`` is standard input; gzip input is decompressed), keeping every span."""
    parsed: list[ParsedSpan] = []
    for batch in parse_trace_files(paths, limits):
        parsed.extend(batch)
    records, repairs = assemble(parsed)
    return TraceSet(records, source_names(paths), repairs)


def source_names(paths: Sequence[str]) -> tuple[str, ...]:
    """The inputs as messages name them (``-`` is ``<stdin>``)."""
    return tuple("<stdin>" if p == "-" else p for p in paths)


def parse_trace_files(
    paths: Sequence[str],
    limits: InputLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
    logs: Callable[[LogEvent], None] | None = None,
    events: frozenset[str] = frozenset(),
) -> Iterator[list[ParsedSpan]]:
    """The spans of each document of each file, in reading order, one list per document.

    Files are read line by line: what is held is the current line (or, for a whole JSON
    document, that document), never the whole input. ``progress(spans, bytes)`` is told
    the running totals after each document. Raises :class:`TraceInputError` at the first
    problem, including going over a limit, so a consumer that acts only at the end acts
    on all of the input or on none of it. The log records among the documents (a file
    of both signals) whose event name is one of ``events`` go to ``logs``.
    """
    limits = limits or InputLimits()
    strings = SharedStrings()
    spans = 0
    consumed = 0
    for path in paths:
        name = "<stdin>" if path == "-" else path
        with _opened(path, name) as stream:
            source = _Source(stream, name, limits)
            for where, document in _documents(source, name, limits):
                batch = _spans_of(document, where, strings, logs, events)
                spans += len(batch)
                if spans > limits.max_spans:
                    raise TraceInputError(f"{where}: more than {limits.max_spans:,} spans in all (see --max-spans)")
                yield batch
                if progress is not None:
                    progress(spans, consumed + source.raw_bytes())
            consumed += source.raw_bytes()


def read_jaeger(
    url: str, service: str, lookback: str, *, limit: int, timeout_s: float, limits: InputLimits | None = None
) -> TraceSet:
    """Search a Jaeger query service for ``service``'s traces of the last ``lookback``."""
    limits = limits or InputLimits()
    try:
        seconds = parse_duration(lookback)
    except ValueError as exc:
        raise TraceInputError(f"--lookback: {exc}") from None
    document, where = fetch_jaeger(url, service, seconds, limit=limit, timeout_s=timeout_s, limits=limits)
    parsed = spans_from_jaeger(document, where)
    if len(parsed) > limits.max_spans:
        raise TraceInputError(f"{where}: more than {limits.max_spans:,} spans (see --max-spans)")
    label = f"{url.rstrip('/')} (service {service}, last {lookback})"
    records, repairs = assemble(parsed)
    return TraceSet(records, (label,), repairs)


@contextmanager
def _opened(path: str, name: str) -> Iterator[IO[bytes]]:
    """The file (or standard input) as a binary stream, read errors as :class:`TraceInputError`."""
    try:
        if path == "-":
            stdin = sys.stdin
            if stdin is None or stdin.closed:
                raise TraceInputError("<stdin>: standard input is closed")
            yield stdin.buffer
        else:
            with open(path, "rb") as handle:
                yield handle
    except OSError as exc:  # includes gzip.BadGzipFile
        if path == "-" and exc.errno == errno.EBADF:
            raise TraceInputError("<stdin>: standard input is closed") from None
        reason = exc.strerror or str(exc)
        raise TraceInputError(f"{name}: cannot read: {reason}") from None
    except EOFError:
        raise TraceInputError(f"{name}: cannot read: the compressed data is truncated") from None
    except zlib.error as exc:
        raise TraceInputError(f"{name}: cannot read: the compressed data is corrupt ({exc})") from None


class _Source:
    """A stream (decompressed if it is gzip) read line by line, at most ``max_bytes`` + 1 bytes of it."""

    def __init__(self, stream: IO[bytes], name: str, limits: InputLimits) -> None:
        head = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
        self.raw = stream
        self.compressed = head == _GZIP_MAGIC
        self.source: IO[bytes] | gzip.GzipFile = gzip.GzipFile(fileobj=stream, mode="rb") if self.compressed else stream
        self.name = name
        self.limits = limits
        self.size = 0

    def raw_bytes(self) -> int:
        """Bytes of the file read so far (before decompression), for progress."""
        try:
            return self.raw.tell()
        except (OSError, ValueError):  # a pipe
            return 0

    def _count(self, data: bytes) -> bytes:
        self.size += len(data)
        if self.size > self.limits.max_bytes:
            after = " after decompression" if self.compressed else ""
            raise TraceInputError(
                f"{self.name}: more than {_size(self.limits.max_bytes)}{after} (see --max-input-size)"
            )
        return data

    def readline(self) -> bytes:
        """The next line with its newline (``b""`` at the end), or the first ``max_line_bytes`` + 1 bytes of it."""
        return self._count(
            self.source.readline(min(self.limits.max_line_bytes + 1, self.limits.max_bytes + 1 - self.size) + 1)
        )

    def rest(self) -> bytes:
        """Everything left."""
        chunks: list[bytes] = []
        while True:
            chunk = self.source.read(min(_CHUNK, self.limits.max_bytes + 1 - self.size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(self._count(chunk))


def _size(count: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor and count % factor == 0:
            return f"{count // factor:,} {unit}"
    return f"{count:,} bytes"


def _spans_of(
    document: object,
    where: str,
    strings: SharedStrings,
    logs: Callable[[LogEvent], None] | None = None,
    events: frozenset[str] = frozenset(),
) -> list[ParsedSpan]:
    if is_otlp(document):
        return spans_from_otlp(document, where, strings)  # type: ignore[arg-type]
    if is_jaeger(document):
        return spans_from_jaeger(document, where)  # type: ignore[arg-type]
    if is_otlp_logs(document):
        # Log records beside the spans, as one file exporter of two pipelines writes them.
        if logs is not None and events:
            for found in log_events_from_otlp(document, where, events, strings):  # type: ignore[arg-type]
                logs(found)
        return []
    raise _unknown_format(where, document)


def read_log_files(
    paths: Sequence[str], limits: InputLimits, logs: Callable[[LogEvent], None], events: frozenset[str]
) -> int:
    """Read OTLP/JSON log files (``--logs``), line by line, sending the records named in ``events`` to ``logs``.

    A file may hold spans too (both signals in one file): they are skipped here. Any other
    document is a :class:`TraceInputError`; the records sent count against
    ``limits.max_spans``. Returns how many were sent.
    """
    strings = SharedStrings()
    sent = 0
    for path in paths:
        name = "<stdin>" if path == "-" else path
        with _opened(path, name) as stream:
            source = _Source(stream, name, limits)
            # An empty file is no error: a Collector's logs pipeline that exported nothing leaves one.
            for where, document in _documents(source, name, limits, empty_ok=True):
                if is_otlp(document):
                    continue
                if not is_otlp_logs(document):
                    raise TraceInputError(f"{where}: {_NOT_LOGS}")
                for found in log_events_from_otlp(document, where, events, strings):  # type: ignore[arg-type]
                    sent += 1
                    if sent > limits.max_spans:
                        raise TraceInputError(
                            f"{where}: more than {limits.max_spans:,} evaluation records in all (see --max-spans)"
                        )
                    logs(found)
    return sent


def _unknown_format(where: str, document: object) -> TraceInputError:
    found = foreign_format(document)
    return _named(where, found) if found is not None else TraceInputError(f"{where}: {_UNKNOWN_FORMAT}")


def _named(where: str, found: str) -> TraceInputError:
    return TraceInputError(f"{where}: this is {found}, a format latency-budget does not read; {RECORD_HINT}")


def _documents(
    source: _Source, name: str, limits: InputLimits, *, empty_ok: bool = False
) -> Iterator[tuple[str, object]]:
    """``(where, document)`` pairs: one per non-blank line of JSON lines, or the whole document.

    An empty input is an error, unless ``empty_ok`` (then it has no documents).
    """
    head: list[bytes] = []
    line = source.readline()
    if line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8) :]
    elif line.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise TraceInputError(f"{name}: UTF-16 or UTF-32 text; expected UTF-8 (OTLP JSON or Jaeger JSON)")
    while line and not line.strip():
        head.append(line)
        line = source.readline()
    if not line:
        if empty_ok:
            return
        raise TraceInputError(f"{name}: the file is empty")
    number = len(head) + 1
    if _is_json_object_line(line.rstrip(b"\n"), limits):
        while line:
            content = line[:-1] if line.endswith(b"\n") else line
            if content.strip():
                where = f"{name}:{number}"
                if len(content) > limits.max_line_bytes:
                    raise TraceInputError(
                        f"{where}: a line longer than {_size(limits.max_line_bytes)} (see --max-line-size)"
                    )
                yield where, load_json(_decode(content, where, 0), where, limits, line_mode=True)
            line = source.readline()
            number += 1
        return
    data = b"".join([*head, line, source.rest()])
    text = _decode(data, name, 1)
    try:
        document = load_json(text, name, limits, line_mode=False)
    except TraceInputError:
        # Many pretty-printed objects in a row (the console exporter's output) are no one document.
        found = foreign_format(first_value(text))
        if found is None:
            raise
        raise _named(name, found) from None
    yield name, document


def _is_json_object_line(line: bytes, limits: InputLimits) -> bool:
    """Whether ``line`` is a whole JSON object on its own (then the input is JSON lines)."""
    if len(line) > limits.max_line_bytes:
        return True  # too long to try; as JSON lines it is an error naming the line
    try:
        head = json.loads(line.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    except (ValueError, RecursionError):  # complete JSON, but unusable: the line's own error says why
        return line.lstrip().startswith(b"{")
    return isinstance(head, dict)


def _decode(data: bytes, where: str, first_line: int) -> str:
    """UTF-8 text; ``first_line`` (0 for one line of JSON lines) places an error in a whole file."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if first_line:
            line = data.count(b"\n", 0, exc.start) + first_line
            raise TraceInputError(
                f"{where}:{line}: not UTF-8 text (byte {exc.start}); expected OTLP JSON or Jaeger JSON"
            ) from None
        raise TraceInputError(f"{where}: not UTF-8 text (byte {exc.start} of the line)") from None
