"""The one place that touches OpenTelemetry SDK internals, for speed, with a public fallback.

The processor runs on every span, and on CPython 3.11 each property read of an SDK span
(``span.context``, ``span.name``, ``span.attributes``, ...) costs about as much as ten
dictionary lookups; ``span.attributes`` also wraps a ``BoundedAttributes`` whose ``get``
runs through ``collections.abc`` in Python. So the hot path reads the fields the
properties return, directly, and builds annotated copies by copying the snapshot's
fields. At import, a probe checks on real SDK spans that the internals give exactly what
the public API gives; if not (another SDK version), every function here uses the public
API instead. One write happens, the stage label of a live span (see set_label), and
only where it is exactly what ``set_attributes`` would do.

One read more, off the hot path: the temporality a metric exporter prefers
(:func:`preferred_temporality`), as the SDK's own periodic reader reads it, for serve's
metric bank; cumulative when it is not there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any, cast

from opentelemetry.sdk.trace import Event, ReadableSpan, Span, TracerProvider
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.util.types import AttributeValue

__all__ = [
    "FAST_PATH",
    "IS_REMOTE",
    "SPAN_ID",
    "TRACE_FLAGS",
    "TRACE_ID",
    "ContextTuple",
    "SpanView",
    "annotated_copy",
    "context_of",
    "events_of",
    "parent_of",
    "preferred_temporality",
    "set_label",
    "view_of",
    "view_of_any",
]

_EMPTY: Mapping[str, Any] = {}

# The hot path reads a span in two C-level calls instead of a Python function: its
# context first (enough to skip an unsampled span), then a view of what classifying
# and accounting need. A context is read by index, as a tuple laid out like the API's
# SpanContext (a tuple subclass): (trace_id, span_id, is_remote, trace_flags, ...).
TRACE_ID, SPAN_ID, IS_REMOTE, TRACE_FLAGS = 0, 1, 2, 3
ContextTuple = tuple[Any, ...]
# (parent context or None, name, kind, instrumentation scope name, start ns, end ns,
# attributes); the times are None while unset; the attributes are read-only.
SpanView = tuple["ContextTuple | None", str, SpanKind, str, "int | None", "int | None", Mapping[str, Any]]


# -- public API versions (the fallback, and the reference the probe compares with) --------


def _public_events(span: ReadableSpan) -> Sequence[Event]:
    return span.events


class _CopiedSpan(ReadableSpan):
    """A ``ReadableSpan`` that reports the dropped counts of the span it copies."""

    _copied_dropped_attributes = 0
    _copied_dropped_events = 0

    @property
    def dropped_attributes(self) -> int:
        return self._copied_dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._copied_dropped_events


class _AnnotatedSpan(_CopiedSpan):
    """A copy built through the public constructor."""

    def __init__(self, *, dropped_attributes: int, dropped_events: int, **fields: Any) -> None:
        super().__init__(**fields)
        self._copied_dropped_attributes = dropped_attributes
        self._copied_dropped_events = dropped_events


def _public_copy(
    span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event] = ()
) -> ReadableSpan:
    return _AnnotatedSpan(
        dropped_attributes=span.dropped_attributes,
        dropped_events=span.dropped_events,
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={**(span.attributes or _EMPTY), **attributes},
        events=(*span.events, *events) if events else span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _context_tuple(ctx: Any) -> ContextTuple:
    return (ctx.trace_id, ctx.span_id, ctx.is_remote, int(ctx.trace_flags))


def _public_context(span: ReadableSpan) -> ContextTuple | None:
    ctx = span.context
    return None if ctx is None else _context_tuple(ctx)


def _public_parent(span: ReadableSpan) -> ContextTuple | None:
    parent = span.parent
    return None if parent is None else _context_tuple(parent)


def _public_view(span: ReadableSpan) -> SpanView:
    parent = span.parent
    scope = span.instrumentation_scope
    return (
        None if parent is None else _context_tuple(parent),
        span.name,
        span.kind,
        scope.name if scope is not None else "",
        span.start_time,
        span.end_time,
        span.attributes or _EMPTY,
    )


def _public_label(span: Span, attributes: Mapping[str, AttributeValue]) -> None:
    span.set_attributes(attributes)


# -- fast versions ---------------------------------------------------------------------


def _fast_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    inner = getattr(span._attributes, "_dict", None)
    if inner.__class__ is dict:
        return inner
    return span.attributes or _EMPTY


def _fast_events(span: ReadableSpan) -> Sequence[Event]:
    # An ended span's events no longer change: read the BoundedList's deque without the
    # lock-and-copy that ``span.events`` does (the processor only reads them after end).
    events = span._events
    inner = getattr(events, "_dq", None)
    if inner is not None:
        return inner  # type: ignore[no-any-return]
    return tuple(events)


_fast_context = attrgetter("_context")
_fast_parent = attrgetter("_parent")
# Raises AttributeError for a span without an instrumentation scope, or whose attributes
# are not the SDK's BoundedAttributes (one built by hand): see view_of_any.
_fast_view = attrgetter(
    "_parent", "_name", "_kind", "_instrumentation_scope._name", "_start_time", "_end_time", "_attributes._dict"
)


def _fast_label(span: Span, attributes: Mapping[str, AttributeValue]) -> None:
    # ``set_attributes`` validates every value through collections.abc checks: about a
    # third of the SDK's whole cost of a span for two attributes. Ours are valid by
    # construction (str and float), so when the span's limits leave room and nothing
    # would be truncated, insert them as the SDK does, under the same two locks in the
    # same order; in every other case (ended, full, length limit, another
    # implementation) let the SDK do it.
    bounded: Any = span._attributes
    inner = getattr(bounded, "_dict", None)
    if inner.__class__ is dict and not getattr(bounded, "_immutable", True) and bounded.max_value_len is None:
        maxlen = bounded.maxlen
        # The locks by acquire() and release() in try/finally, not `with`: held the same way,
        # for about 1,100 instructions less each under callgrind (CPython 3.11: a lock's
        # __exit__ takes its three arguments as a tuple), at every stage span's start.
        span_lock, attributes_lock = span._lock, bounded._lock
        span_lock.acquire()
        try:
            if span._end_time is None and (maxlen is None or len(inner) + len(attributes) <= maxlen):
                attributes_lock.acquire()
                try:
                    for key, value in attributes.items():
                        if key in inner:
                            del inner[key]  # as the SDK does: a re-set key moves to the end
                        inner[key] = value
                finally:
                    attributes_lock.release()
                return
        finally:
            span_lock.release()
    span.set_attributes(attributes)


class _FastAnnotatedSpan(_CopiedSpan):
    """A copy made by copying the snapshot's fields (see _fast_copy)."""


def _fast_copy(
    span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event] = ()
) -> ReadableSpan:
    copy = _FastAnnotatedSpan.__new__(_FastAnnotatedSpan)
    copy.__dict__ = fields = span.__dict__.copy()  # a clone of the dict: cheaper than update()
    fields["_attributes"] = {**_fast_attributes(span), **attributes}
    if events:
        fields["_events"] = (*span._events, *events)
    # What the dropped_* properties return, without their isinstance checks when the
    # SDK's bounded containers hold the count; otherwise (a copy of a copy) the property.
    dropped = getattr(span._attributes, "dropped", None)
    fields["_copied_dropped_attributes"] = dropped if dropped is not None else span.dropped_attributes
    dropped = getattr(span._events, "dropped", None)
    fields["_copied_dropped_events"] = dropped if dropped is not None else span.dropped_events
    return copy


# -- the probe -------------------------------------------------------------------------


def _same_span(a: ReadableSpan, b: ReadableSpan) -> bool:
    return (
        a.name == b.name
        and a.context == b.context
        and a.parent == b.parent
        and a.kind == b.kind
        and a.start_time == b.start_time
        and a.end_time == b.end_time
        and dict(a.attributes or {}) == dict(b.attributes or {})
        and [(e.name, dict(e.attributes or {}), e.timestamp) for e in a.events]
        == [(e.name, dict(e.attributes or {}), e.timestamp) for e in b.events]
        and a.links == b.links
        and a.status.status_code == b.status.status_code
        and a.resource == b.resource
        and a.instrumentation_scope == b.instrumentation_scope
        and a.dropped_attributes == b.dropped_attributes
        and a.dropped_events == b.dropped_events
    )


def _same_view(span: ReadableSpan | Span) -> bool:
    """The fast context and view read what the public API gives, the contexts by index."""
    fast_ctx, public_ctx = _fast_context(span), _public_context(span)
    if fast_ctx is None or public_ctx is None or tuple(fast_ctx[:4]) != public_ctx:
        return False
    fast, public = _fast_view(span), _public_view(span)
    fast_parent, public_parent = fast[0], public[0]
    if (fast_parent is None) != (public_parent is None):
        return False
    if fast_parent is not None and public_parent is not None and tuple(fast_parent[:4]) != public_parent:
        return False
    return fast[1:6] == public[1:6] and dict(fast[6]) == dict(public[6])


def _probe() -> bool:
    """Whether real SDK spans expose their fields the way the fast functions expect."""
    try:
        tracer = TracerProvider(shutdown_on_exit=False).get_tracer("latency_budget.probe", "1")
        root = cast(Span, tracer.start_span("probe root", kind=SpanKind.SERVER, start_time=1_000))
        child = cast(Span, tracer.start_span("probe", set_span_in_context(root), attributes={"k": 1}, start_time=2_000))
        child.set_attribute("later", True)
        twin = cast(Span, tracer.start_span("probe", set_span_in_context(root), attributes={"k": 1}, start_time=2_000))
        twin.set_attribute("later", True)
        label: dict[str, AttributeValue] = {"later": False, "label": "x", "budget": 1.5}
        _fast_label(child, label)
        _public_label(twin, label)
        if list(_fast_attributes(child).items()) != list(_fast_attributes(twin).items()):
            return False
        if child.dropped_attributes != twin.dropped_attributes or not _same_view(root):
            return False
        child.add_event("e", {"a": "b"}, timestamp=2_500)
        if dict(_fast_attributes(child)) != dict(child.attributes or {}) or not _same_view(child):
            return False
        child.end(end_time=3_000)
        snapshot = child._readable_span()
        if not _same_view(snapshot):
            return False
        if list(_fast_events(snapshot)) != list(_public_events(snapshot)):
            return False
        extra = {"x": 1.5}
        added = [Event("added", {"n": 1}, timestamp=3_000)]
        fast, public = _fast_copy(snapshot, extra, added), _public_copy(snapshot, extra, added)
        root.end(end_time=4_000)
        expected = {"k": 1, "later": False, "label": "x", "budget": 1.5, "x": 1.5}
        return _same_span(fast, public) and dict(fast.attributes or {}) == expected
    except Exception:
        return False


FAST_PATH = _probe()
events_of = _fast_events if FAST_PATH else _public_events
events_of.__doc__ = "The events of an ended span, in order (read-only)."
context_of = _fast_context if FAST_PATH else _public_context
# A Python docstring cannot be set on an attrgetter: what they return is described above.
parent_of = _fast_parent if FAST_PATH else _public_parent  # the first field of view_of
view_of = _fast_view if FAST_PATH else _public_view
# For a span view_of raised AttributeError on (no scope, hand-built attributes): never raises.
view_of_any = _public_view
set_label = _fast_label if FAST_PATH else _public_label
set_label.__doc__ = "Set attributes valid by construction (str, float) on a live span, as set_attributes would."
annotated_copy = _fast_copy if FAST_PATH else _public_copy
annotated_copy.__doc__ = "A copy of an ended span with ``attributes`` merged over its own and ``events`` appended."


def preferred_temporality(exporter: object) -> Callable[[type], Any]:
    """The aggregation temporality a metric exporter asks for, by SDK instrument class (cumulative by default).

    It is what the SDK's ``PeriodicExportingMetricReader`` reads from its exporter
    (``_preferred_temporality``, set by ``MetricExporter.__init__`` from, for OTLP,
    ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``), for serve's metric bank,
    which exports without a reader.
    """
    from opentelemetry.sdk.metrics.export import AggregationTemporality  # noqa: PLC0415

    preferred = getattr(exporter, "_preferred_temporality", None)
    table: Mapping[type, Any] = preferred if isinstance(preferred, Mapping) else {}
    return lambda kind: table.get(kind, AggregationTemporality.CUMULATIVE)
