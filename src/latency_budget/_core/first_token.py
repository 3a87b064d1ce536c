"""Reading a span's time to first token from what instrumentations record."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

from opentelemetry.sdk.trace import Event

from latency_budget._config.genai_defaults import DIALECTS, TOOL_CALL_FINISH_REASONS, TOOL_CALLS_ONLY
from latency_budget._config.model import FirstTokenSource

__all__ = ["answered_with_tool_calls_only", "not_a_generation", "parse_instant_ns", "time_to_first_token_ns"]

# The rows of TOOL_CALLS_ONLY that read an event, and every attribute the other rows read:
# a span with none of those attributes (most model calls) is decided by the event rows
# alone, without a pass over every row.
_EVENT_ROWS = tuple(row for row in TOOL_CALLS_ONLY if row.event is not None)
_ROW_KEYS = frozenset(
    key
    for row in TOOL_CALLS_ONLY
    if row.event is None
    for key in (row.finish_key, row.messages_key, row.tool_call_key)
    if key is not None
)


def _not_generations() -> tuple[tuple[str, frozenset[str]], ...]:
    """Per dialect key, the values the dialect table gives to anything but a model call: retrieval, tools, agents."""
    merged: dict[str, set[str]] = {}
    for dialect in DIALECTS:
        values = merged.setdefault(dialect.key, set())
        values.update(dialect.not_stages)
        for stage, listed in dialect.stages.items():
            if stage != "model_call":
                values.update(listed)
    for dialect in DIALECTS:  # a value some dialect calls a model call is left to the stage
        merged[dialect.key].difference_update(dialect.stages.get("model_call", ()))
    return tuple((key, frozenset(values)) for key, values in merged.items() if values)


# The operations that are no model (generation) call, by the dialect table: a first-token
# attribute on them (OpenLIT writes one on embeddings) is no token of any answer.
_NOT_GENERATION = _not_generations()
_SCALE_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# Date and time with seconds, an optional fraction, and a zone (required: a time without
# one cannot be placed on the span's clock). A space may stand for the T, as RFC 3339 allows.
_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|z|[+-]\d{2}:?\d{2})", re.ASCII
)


def time_to_first_token_ns(
    sources: Sequence[FirstTokenSource],
    start_ns: int,
    attributes: Mapping[str, object],
    read_events: Callable[[Any], Sequence[Event]],
    span: object,
    scope: str = "",
) -> int | None:
    """Nanoseconds from the span's start to its first token, from the first usable source.

    ``read_events(span)`` gives the span's events; it is called only if an event source
    is reached (copying a live span's events takes a lock). A source bound to another
    instrumentation scope than ``scope`` is passed over. Values that are non-numeric,
    negative or not finite are skipped, never an error.
    """
    events: Sequence[Event] | None = None
    for source in sources:
        if source.scope is not None and source.scope != scope:
            continue
        if source.attribute is not None:
            value = attributes.get(source.attribute)
            if value is None:
                continue
            found = _from_attribute(value, source.unit, start_ns)
        else:
            if events is None:
                events = read_events(span)
            if not events:  # the common case: no event to look for, and no call to look
                continue
            found = _from_event(source.event, start_ns, events)
        if found is not None:
            return found
    return None


def not_a_generation(attributes: Mapping[str, object]) -> bool:
    """Whether a span's operation is one the dialect table calls retrieval, a tool call or no call at all.

    Such a span's first-token attribute or event is not read: the first token is a model's.
    """
    for key, values in _NOT_GENERATION:
        value = attributes.get(key)
        if value.__class__ is str and value in values:
            return True
    return False


def _from_attribute(value: object, unit: str, start_ns: int) -> int | None:
    if unit == "iso8601":
        instant = parse_instant_ns(value)
        if instant is None or instant < start_ns:
            return None
        return instant - start_ns
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    try:
        return int(value * _SCALE_NS[unit])
    except OverflowError:  # finite, but too large to scale to nanoseconds: not a usable value
        return None


def _from_event(name: str | None, start_ns: int, events: Sequence[Event]) -> int | None:
    for event in events:
        if event.name == name:
            stamp = event.timestamp
            if stamp is None or stamp < start_ns:
                return None
            return stamp - start_ns
    return None


def parse_instant_ns(value: object) -> int | None:
    """An ISO-8601 instant with a zone, as nanoseconds since the epoch; ``None`` if it is not one.

    Accepts what instrumentations write: Langfuse's JSON-encoded string (``'"...Z"'``),
    ``Z`` or a numeric offset, any number of fractional digits (kept to the nanosecond),
    on every supported Python (3.10's ``fromisoformat`` knows none of these).
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if len(text) >= 2 and text[0] == '"' == text[-1]:
        text = text[1:-1]
    found = _INSTANT.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    try:
        days = date(int(year), int(month), int(day)).toordinal() - _EPOCH_ORDINAL
    except ValueError:  # no such day
        return None
    if int(hour) > 23 or int(minute) > 59 or int(second) > 59:
        return None
    seconds = days * 86_400 + int(hour) * 3600 + int(minute) * 60 + int(second)
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        if hours > 23 or minutes > 59:
            return None
        seconds -= sign * (hours * 3600 + minutes * 60)
    nanos = int(fraction[:9].ljust(9, "0")) if fraction else 0
    return seconds * 1_000_000_000 + nanos


def answered_with_tool_calls_only(
    attributes: Mapping[str, object],
    read_events: Callable[[Any], Sequence[Event]] | None = None,
    span: object = None,
    scope: str = "",
) -> bool:
    """Whether a model call's final attributes (or events) say it answered with tool calls only, no text.

    Such a call's first chunk is no token the user sees: it is not the request's first
    token. Read from the first row of ``TOOL_CALLS_ONLY`` the span carries; a span that
    says nothing is taken to have answered (as before). A row bound to another scope than
    ``scope`` is passed over; ``read_events(span)`` is called only for a row that reads an
    event (none when it is ``None``).
    """
    events: Sequence[Event] | None = None
    for row in _EVENT_ROWS if _ROW_KEYS.isdisjoint(attributes) else TOOL_CALLS_ONLY:
        if row.scope is not None and row.scope != scope:
            continue
        if row.finish_key is not None:
            if row.event is None:
                value = attributes.get(row.finish_key)
            elif read_events is None:
                continue
            else:
                if events is None:
                    events = read_events(span)
                value = _event_attribute(events, row.event, row.finish_key)
            if value is None:
                continue
            reasons = _reasons(value)
            if not isinstance(reasons, (tuple, list)) or not reasons:
                return False
            return all(reason in TOOL_CALL_FINISH_REASONS for reason in reasons)
        if row.messages_key is not None:
            messages = attributes.get(row.messages_key)
            if messages is None:
                continue
            return _only_tool_call_parts(messages)
        if row.tool_call_key is not None and attributes.get(row.tool_call_key) is not None:
            return not (row.text_key is not None and _has_text(attributes.get(row.text_key)))
    return False


def _event_attribute(events: Sequence[Event], name: str, key: str) -> object:
    """``key`` of the first event called ``name`` that has it, or None."""
    for event in events:
        if event.name == name:
            value = (event.attributes or {}).get(key)
            if value is not None:
                return value
    return None


def _reasons(value: object) -> object:
    """Finish reasons as a sequence: one string, a sequence, or a JSON array in a string (as Jaeger keeps arrays)."""
    if not isinstance(value, str):
        return value
    if value.startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            return ()
    return (value,)


def _only_tool_call_parts(messages: object) -> bool:
    """Whether output messages (JSON text, as the conventions write them) have parts, all of them tool calls."""
    if not isinstance(messages, str):
        return False
    try:
        decoded = json.loads(messages)
    except ValueError:
        return False
    if not isinstance(decoded, list):
        return False
    types = [
        part.get("type")
        for message in decoded
        if isinstance(message, dict) and isinstance(message.get("parts"), list)
        for part in message["parts"]
        if isinstance(part, dict) and not _blank_text(part)
    ]
    return bool(types) and all(kind == "tool_call" for kind in types)


def _blank_text(part: dict[str, Any]) -> bool:
    """Whether an output part is a text part with no text (OpenLLMetry writes an empty one before tool calls)."""
    if part.get("type") != "text":
        return False
    content = part.get("content")
    return content is None or (isinstance(content, str) and not content.strip())


def _has_text(value: object) -> bool:
    """Whether a text attribute holds text: an empty or whitespace-only string is none."""
    return bool(value.strip()) if isinstance(value, str) else bool(value)
