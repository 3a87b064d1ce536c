"""Build annotated copies of ended spans.

Ended spans are frozen, so the processor forwards a new ``ReadableSpan`` carrying the
merged attributes and events instead of mutating the original. The copy keeps the
original's dropped-attribute and dropped-event counts, so exporters report them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.util.types import AttributeValue

__all__ = ["annotated_copy"]


def annotated_copy(
    span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event] = ()
) -> ReadableSpan:
    """A copy of ``span`` with ``attributes`` merged over its own and ``events`` appended."""
    merged = BoundedAttributes(maxlen=None, attributes={**(span.attributes or {}), **attributes}, immutable=True)
    merged.dropped = span.dropped_attributes
    all_events = BoundedList.from_seq(None, (*span.events, *events))
    all_events.dropped = span.dropped_events
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=merged,
        events=all_events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
