"""What the format readers produce: span records plus the process each span came from."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, replace

from latency_budget._replay import SpanRecord

from ._errors import TraceInputError

__all__ = ["ParsedSpan", "parse_id", "resolve_remote_parents"]


@dataclass(frozen=True, slots=True)
class ParsedSpan:
    """A span record, the identity of the process (resource) that sent it, and whether the
    recording said if its parent was remote (OTLP span flags can; Jaeger JSON cannot)."""

    record: SpanRecord
    process: str
    remote_known: bool


def parse_id(value: object, size: int, where: str, path: str) -> int:
    """A trace (``size`` 16) or span (8) id: hex, as OTLP/JSON and Jaeger write it, or base64,
    as plain protobuf JSON does. Raises :class:`TraceInputError` naming ``where`` and ``path``."""
    if not isinstance(value, str) or not value:
        raise TraceInputError(f"{where}: {path}: expected a hex id, got {value!r}")
    if len(value) <= size * 2:
        try:
            number = int(value, 16)
        except ValueError:
            number = -1
        if number > 0:
            return number
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size and any(raw):
        return int.from_bytes(raw, "big")
    raise TraceInputError(f"{where}: {path}: not a valid {size * 8}-bit id: {value!r}")


def resolve_remote_parents(spans: Iterable[ParsedSpan]) -> list[SpanRecord]:
    """The records, with ``remote_parent`` set where the recording did not say.

    Without span flags, a parent recorded by another process (another resource, or
    another Jaeger process) is taken to be remote, so that the span starts its own
    local root, as it does in the live processor of that other process.
    """
    spans = list(spans)
    process_of = {(s.record.trace_id, s.record.span_id): s.process for s in spans}
    records: list[SpanRecord] = []
    for span in spans:
        record = span.record
        if not span.remote_known and record.parent_id is not None:
            parent_process = process_of.get((record.trace_id, record.parent_id))
            if parent_process is not None and parent_process != span.process:
                record = replace(record, remote_parent=True)
        records.append(record)
    return records
