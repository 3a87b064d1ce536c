"""What the format readers produce, and how their spans become one consistent recording.

Recordings can be inconsistent: an exporter that retried writes a span twice, a broken
tool gives several spans one id, parent references go round in a circle. Nothing of that
is dropped or decided silently: :func:`assemble` keeps the first span of each id, breaks
each parent cycle at a stated span, and counts both in :class:`Repairs`, which the CLI
reports on standard error and in ``--format json``. Ids that are not ids at all are an
error naming the file, the line and the field (:func:`parse_id`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from latency_budget._core.wording import plural
from latency_budget._replay import SpanRecord

from ._errors import TraceInputError, show

__all__ = ["ParsedSpan", "Repairs", "assemble", "assemble_located", "parse_id"]

_HEX = re.compile(r"[0-9a-fA-F]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


@dataclass(frozen=True, slots=True)
class ParsedSpan:
    """A span record, the identity of the process (resource) that sent it, whether the
    recording said if its parent was remote (OTLP span flags can; Jaeger JSON cannot),
    and where it was read (``file:line: path``), for messages."""

    record: SpanRecord
    process: str
    remote_known: bool
    where: str


def parse_id(value: object, size: int, where: str, path: str, *, exact: bool) -> int:
    """A trace (``size`` 16) or span (8) id, which must not be all zeros.

    Hex digits (ASCII only: no ``0x``, spaces or other scripts' digits): exactly
    ``2 * size`` of them when ``exact`` (OTLP/JSON), else at most that many (Jaeger omits
    leading zeros). With ``exact``, also base64 of ``size`` bytes, as plain protobuf JSON
    writes ids. Raises :class:`TraceInputError` naming ``where`` and ``path``.
    """
    if not isinstance(value, str) or not value:
        raise TraceInputError(f"{where}: {path}: expected a hex id, got {show(value)}")
    digits = size * 2
    if _HEX.fullmatch(value) and (len(value) == digits if exact else len(value) <= digits):
        number = int(value, 16)
        if number:
            return number
        raise TraceInputError(f"{where}: {path}: an id of all zeros is not a valid id")
    if exact and len(value) == 4 * ((size + 2) // 3) and _BASE64.fullmatch(value):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size and any(raw):
            return int.from_bytes(raw, "big")
    expected = f"{digits} hex digits" if exact else f"1 to {digits} hex digits"
    raise TraceInputError(f"{where}: {path}: not a valid {size * 8}-bit id ({expected}): {show(value)}")


@dataclass(frozen=True, slots=True)
class Repairs:
    """What :func:`assemble` had to mend in a recording, and where it first met each kind."""

    duplicate_spans: int = 0
    first_duplicate: str | None = None
    parent_cycles: int = 0
    first_cycle: str | None = None

    def __bool__(self) -> bool:
        return bool(self.duplicate_spans or self.parent_cycles)

    def messages(self) -> list[str]:
        """One line per kind of repair, for standard error."""
        lines = []
        if self.duplicate_spans:
            lines.append(
                f"{_spans(self.duplicate_spans)} had the trace and span id of an earlier span and "
                f"{'was' if self.duplicate_spans == 1 else 'were'} left out, keeping the first "
                f"(first at {self.first_duplicate})"
            )
        if self.parent_cycles:
            cycles = plural(self.parent_cycles, "parent cycle", grouped=True)
            lines.append(
                f"{cycles} (spans that are their own ancestors) broken by making the earliest span of each "
                f"a root (first at {self.first_cycle})"
            )
        return lines

    def as_json(self) -> dict[str, Any]:
        """The counts, for ``--format json``."""
        return {"duplicate_spans": self.duplicate_spans, "parent_cycles": self.parent_cycles}


def _spans(count: int) -> str:
    return plural(count, "span", grouped=True)


def assemble(spans: Iterable[ParsedSpan]) -> tuple[list[SpanRecord], Repairs]:
    """One consistent set of records: duplicates left out, remote parents set, parent cycles broken.

    A span whose (trace id, span id) was seen before is left out (the first one read is
    kept). Without span flags, a parent recorded by another process (another resource, or
    another Jaeger process) is taken to be remote, so that the span starts its own local
    root, as it does in the live processor of that other process. In a cycle of parent
    references, the span that started first (then the lowest span id) becomes a root.
    """
    records, repairs, _ = assemble_located(spans)
    return records, repairs


def assemble_located(spans: Iterable[ParsedSpan]) -> tuple[list[SpanRecord], Repairs, tuple[int, int]]:
    """:func:`assemble`, and where among ``spans`` its first duplicate and its first broken cycle were (-1: none).

    Every repair is within one trace, so a recording can be assembled trace by trace;
    the positions let the reader keep the first of each kind in reading order.
    """
    kept: dict[tuple[int, int], tuple[int, ParsedSpan]] = {}
    duplicates = 0
    first_duplicate = None
    duplicate_at = -1
    for position, span in enumerate(spans):
        key = (span.record.trace_id, span.record.span_id)
        if key in kept:
            duplicates += 1
            if first_duplicate is None:
                first_duplicate, duplicate_at = span.where, position
        else:
            kept[key] = (position, span)
    records: dict[tuple[int, int], SpanRecord] = {}
    for key, (_, span) in kept.items():
        record = span.record
        if not span.remote_known and record.parent_id is not None:
            parent = kept.get((record.trace_id, record.parent_id))
            if parent is not None and parent[1].process != span.process:
                record = replace(record, remote_parent=True)
        records[key] = record
    cycles = _break_cycles(records)
    first_cycle, cycle_at = (kept[cycles[0]][1].where, kept[cycles[0]][0]) if cycles else (None, -1)
    repairs = Repairs(duplicates, first_duplicate, len(cycles), first_cycle)
    return list(records.values()), repairs, (duplicate_at, cycle_at)


def _break_cycles(records: dict[tuple[int, int], SpanRecord]) -> list[tuple[int, int]]:
    """Make one span of each parent cycle a root, in place; the keys of the spans changed, in reading order."""

    def parent_of(key: tuple[int, int]) -> tuple[int, int] | None:
        record = records[key]
        if record.parent_id is None or record.remote_parent:
            return None
        parent = (record.trace_id, record.parent_id)
        return parent if parent in records else None

    done: set[tuple[int, int]] = set()
    broken: list[tuple[int, int]] = []
    for start in list(records):
        path: list[tuple[int, int]] = []
        on_path: set[tuple[int, int]] = set()
        key: tuple[int, int] | None = start
        while key is not None and key not in done:
            if key in on_path:  # walked back into this walk: the path from `key` on is a cycle
                cycle = path[path.index(key) :]
                root = min(cycle, key=lambda k: (records[k].start_ns, k[1]))
                records[root] = replace(records[root], parent_id=None)
                broken.append(root)
                break
            path.append(key)
            on_path.add(key)
            key = parent_of(key)
        done.update(path)
    order = {key: n for n, key in enumerate(records)}
    return sorted(broken, key=order.__getitem__)
