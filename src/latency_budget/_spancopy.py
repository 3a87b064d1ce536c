"""Build annotated copies of ended spans.

Ended spans are frozen, so the processor forwards a new ``ReadableSpan`` carrying the
merged attributes and events instead of mutating the original. The copy reports the
original's dropped-attribute and dropped-event counts, so exporters still send them.
The merged values were validated when they were set (ours are plain str/bool/float/
int/tuple values), so they are not cleaned a second time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.util.types import AttributeValue

from latency_budget._sdk_internals import attributes_of

__all__ = ["annotated_copy"]


class _AnnotatedSpan(ReadableSpan):
    """A ``ReadableSpan`` that remembers the dropped counts of the span it copies."""

    def __init__(self, *, dropped_attributes: int, dropped_events: int, **fields: Any) -> None:
        super().__init__(**fields)
        self._copied_dropped_attributes = dropped_attributes
        self._copied_dropped_events = dropped_events

    @property
    def dropped_attributes(self) -> int:
        return self._copied_dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._copied_dropped_events


def annotated_copy(
    span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event] = ()
) -> ReadableSpan:
    """A copy of ``span`` with ``attributes`` merged over its own and ``events`` appended."""
    return _AnnotatedSpan(
        dropped_attributes=span.dropped_attributes,
        dropped_events=span.dropped_events,
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={**attributes_of(span), **attributes},
        events=(*span.events, *events) if events else span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
