"""Reading a span's time to first token from what instrumentations record."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from opentelemetry.sdk.trace import Event

from latency_budget._config.model import FirstTokenSource

__all__ = ["time_to_first_token_ns"]

_SCALE_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


def time_to_first_token_ns(
    sources: Sequence[FirstTokenSource],
    start_ns: int,
    attributes: Mapping[str, object],
    read_events: Callable[[Any], Sequence[Event]],
    span: object,
) -> int | None:
    """Nanoseconds from the span's start to its first token, from the first usable source.

    ``read_events(span)`` gives the span's events; it is called only if an event source
    is reached (copying a live span's events takes a lock). Values that are non-numeric,
    negative or not finite are skipped, never an error.
    """
    events: Sequence[Event] | None = None
    for source in sources:
        if source.attribute is not None:
            value = attributes.get(source.attribute)
            if value is None:
                continue
            found = _from_attribute(value, source.unit, start_ns)
        else:
            if events is None:
                events = read_events(span)
            found = _from_event(source.event, start_ns, events)
        if found is not None:
            return found
    return None


def _from_attribute(value: object, unit: str, start_ns: int) -> int | None:
    if unit == "iso8601":
        instant = _parse_instant_ns(value)
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


def _parse_instant_ns(value: object) -> int | None:
    if not isinstance(value, str):
        return None
    text = value.strip().strip('"')
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None  # a wall-clock time without a zone cannot be placed on the span's clock
    seconds = parsed.timestamp()
    return int(seconds) * 1_000_000_000 + parsed.microsecond * 1000 if math.isfinite(seconds) else None
