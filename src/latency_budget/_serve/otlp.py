"""OTLP trace requests in and out: spans as replay records, annotations, batches to forward.

A received span keeps the bytes it came as (forwarded as they are, but for a judged root's
additions) and its origin, the resource and scope it came with (encoded, shared by the
spans of one scope), so a forwarded batch regroups spans under the same resource and
scope without encoding any span again. The decoder also gives each span the fields of a
:class:`~latency_budget._replay.SpanRecord`, the form the judge reads; the decoded
protobuf request is dropped once they are read, so an open trace holds its spans'
bytes and those fields, not protobuf messages.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import SpanKind

from latency_budget._serve.wire import (
    SPAN_TAG,
    WireError,
    encode_attributes,
    encode_events,
    frame,
    read_request,
    varint,
    write_request,
)

if TYPE_CHECKING:
    from opentelemetry.util.types import Attributes

__all__ = [
    "BadRequest",
    "Origin",
    "Received",
    "annotated",
    "decode_estimate",
    "decode_request",
    "encode_batch",
    "parse_json",
    "parse_protobuf",
    "shrink_span",
]

_KINDS = (SpanKind.INTERNAL, SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER)
_HAS_IS_REMOTE = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_NOTHING: Mapping[str, object] = MappingProxyType({})
# Array attribute values keep at most this many items for the matchers (the span keeps all).
_MAX_ARRAY = 128
# Attributes and events decoded per span (and attributes per event), as the SDK's default span limits.
_MAX_DECODED = 128
# What a held span costs beyond its share of the request's bytes, as tracemalloc measures it
# (tests/serve/test_forward_faults.py holds the sum at or above the measure, within 1.5x): the
# Received object, its ids, name and slots (_SPAN_COST); when its attributes are decoded, a copy
# of its bytes as values plus a dict entry and a key a pair (_PAIR_COST); an SDK Event an event.
_SPAN_COST = 450
_PAIR_COST = 300
_EVENT_COST = 250


class BadRequest(ValueError):
    """A request body that is not an OTLP trace export (the message says why, without echoing the body)."""


class Origin:
    """The resource and scope a group of received spans came with, encoded (shared, never copied per span)."""

    __slots__ = ("resource", "resource_attributes", "resource_schema", "scope", "scope_name", "scope_schema")

    def __init__(
        self,
        resource: bytes | None,
        resource_schema: bytes,
        resource_attributes: Mapping[str, object],
        scope: bytes | None,
        scope_name: str,
        scope_schema: bytes,
    ) -> None:
        self.resource = resource
        self.resource_schema = resource_schema
        self.resource_attributes = resource_attributes
        self.scope = scope
        self.scope_name = scope_name
        self.scope_schema = scope_schema


class Received:
    """One received span: its bytes, where it came from, its share of the bytes held, and its record.

    ``encoded`` is the span as its ``ScopeSpans`` field (tag, length, the span's bytes as
    they came). The record's fields (:class:`~latency_budget._replay.Recorded`, what the
    judge reads) are held on this object itself: one plain object per span, not two, the
    cheapest thing to build and the least for the garbage collector to walk.
    """

    __slots__ = (
        "attributes",
        "encoded",
        "end_ns",
        "events",
        "kind",
        "name",
        "origin",
        "pairs",
        "parent_id",
        "remote_parent",
        "resource",
        "scope",
        "size",
        "span_id",
        "start_ns",
        "trace_id",
    )

    def __init__(
        self,
        encoded: bytes,
        origin: Origin,
        size: int,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        name: str,
        start_ns: int,
        end_ns: int,
        kind: SpanKind,
        attributes: Mapping[str, object],
        pairs: int,
        events: tuple[Event, ...],
        remote_parent: bool,
    ) -> None:
        self.encoded = encoded
        self.origin = origin
        self.size = size
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.name = name
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.kind = kind
        self.scope = origin.scope_name
        self.attributes = attributes
        self.pairs = pairs  # attribute pairs the span came with: -1 when not counted
        self.events = events
        self.remote_parent = remote_parent
        self.resource = origin.resource_attributes


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` from its protobuf encoding."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except MemoryError:  # not the sender's fault: the caller says "full", retryable
        raise
    except Exception as exc:  # protobuf's DecodeError, or a message nested past its recursion limit
        raise BadRequest(f"not an OTLP protobuf trace export ({type(exc).__name__})") from None
    return request


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` from OTLP/JSON: protobuf JSON with hex trace and span ids.

    The ids are turned into the base64 that protobuf's own JSON parser reads for bytes;
    the rest (lowerCamelCase or original field names, enums as integers, 64-bit integers
    as strings) is that parser's.
    """
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest("not JSON") from None
    if not isinstance(document, dict):
        raise BadRequest("expected a JSON object with resourceSpans")
    try:
        for resource_spans in _list(document, "resourceSpans", "resource_spans"):
            for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
                for span in _list(scope_spans, "spans"):
                    _ids_to_base64(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"))
                    for link in _list(span, "links"):
                        _ids_to_base64(link, ("traceId", "trace_id", "spanId", "span_id"))
        return json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except BadRequest:
        raise
    except Exception as exc:  # json_format.ParseError, and type errors on odd shapes
        raise BadRequest(f"not an OTLP/JSON trace export: {str(exc)[:200]}") from None


def _list(parent: object, *keys: str) -> list[Any]:
    if not isinstance(parent, dict):
        raise BadRequest("expected JSON objects in resourceSpans, scopeSpans and spans")
    for key in keys:
        value = parent.get(key)
        if value is not None:
            if not isinstance(value, list):
                raise BadRequest(f"{key}: expected a list")
            return value
    return []


def _ids_to_base64(item: object, keys: Sequence[str]) -> None:
    if not isinstance(item, dict):
        raise BadRequest("expected JSON objects in resourceSpans, scopeSpans and spans")
    for key in keys:
        value = item.get(key)
        if isinstance(value, str) and value:
            try:
                item[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError:
                raise BadRequest(f"{key}: expected a hex id, got {value[:40]!r}") from None


def decode_request(
    body: bytes, *, wanted: frozenset[str] | None = None, admit: Callable[[int], object] | None = None
) -> tuple[list[Received], int, str]:
    """The spans of an encoded ``ExportTraceServiceRequest``, and how many were rejected and why (the first reason).

    ``body`` is parsed whole by the protobuf library first, so anything it would refuse
    raises :class:`BadRequest` and nothing of the request is kept. A span with a trace
    id that is not 16 bytes or a span id that is not 8 is rejected (it cannot be grouped
    or forwarded meaningfully); the others are kept whatever they hold. Each span's
    ``size`` is what it costs held (:func:`decoded_size`), what it counts for in the
    bounds. ``admit`` is called with the estimated cost of the decoded request
    (:func:`decode_estimate`) before anything is decoded, and may raise to refuse it. A
    span's attributes and events are decoded up to the SDK's default limits (128 each;
    the span's bytes keep them all). With ``wanted`` (the
    keys without one of which no rule can match a span), a span that has a parent and
    none of those keys gets no attributes or events in its record: nothing would read
    them (decoding every attribute is most of the cost of a span).
    """
    try:  # the spans' bytes first: their count bounds the decode's cost before it happens
        groups = read_request(body)
    except WireError as exc:
        raise BadRequest(f"not an OTLP protobuf trace export ({exc})") from None
    total = sum(len(spans) for _, _, scopes in groups for _, _, spans in scopes)
    if admit is not None:
        admit(decode_estimate(len(body), total))
    request = parse_protobuf(body)
    keys = _key_finder(wanted) if wanted else None
    share = len(body) // total + 1 if total else 0
    received: list[Received] = []
    rejected = 0
    reason = ""
    for resource_spans, (resource, resource_schema, scopes) in zip(request.resource_spans, groups, strict=True):
        resource_attributes = attributes_of(resource_spans.resource.attributes)
        for scope_spans, (scope, scope_schema, encoded_spans) in zip(resource_spans.scope_spans, scopes, strict=True):
            origin = Origin(resource, resource_schema, resource_attributes, scope, scope_spans.scope.name, scope_schema)
            for span, encoded in zip(scope_spans.spans, encoded_spans, strict=True):
                trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
                if len(trace_id) != 16 or len(span_id) != 8 or (parent and len(parent) != 8):
                    rejected += 1
                    reason = reason or "a span's trace id is not 16 bytes, or a span id not 8"
                    continue
                attributes: Mapping[str, object]
                pairs = -1
                if wanted is None or not parent:
                    pairs = len(span.attributes)
                    attributes = attributes_of(span.attributes[:_MAX_DECODED])
                    events = _events_of(span) if span.events else ()
                elif keys is not None and keys(encoded) is None:  # a span of no stage: never read
                    attributes, events = _NOTHING, ()
                else:
                    listed = list(span.attributes)  # read once, for the keys and (if wanted) the values
                    if wanted.isdisjoint([pair.key for pair in listed]):  # the bytes were in a value or an event
                        attributes, events = _NOTHING, ()
                    else:
                        pairs = len(listed)
                        attributes = attributes_of(listed[:_MAX_DECODED])
                        events = _events_of(span) if span.events else ()
                flags = span.flags
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                kind = span.kind
                received.append(
                    Received(
                        encoded,
                        origin,
                        share
                        + _SPAN_COST
                        + (len(encoded) + _PAIR_COST * pairs if pairs > 0 else 0)
                        + _EVENT_COST * len(events),
                        int.from_bytes(trace_id, "big"),
                        int.from_bytes(span_id, "big"),
                        int.from_bytes(parent, "big") if parent else None,
                        span.name,
                        start,
                        end if end >= start else start,
                        _KINDS[kind] if 0 <= kind < len(_KINDS) else SpanKind.INTERNAL,
                        attributes,
                        pairs,
                        events,
                        bool(flags & _HAS_IS_REMOTE and flags & _IS_REMOTE),
                    )
                )
    return received, rejected, reason


def decode_in_full(received: Received) -> None:
    """Give ``received`` the attributes and events a narrower ``wanted`` left out (``pairs`` -1), from its bytes.

    For a budget file reloaded with rules that read keys the old one did not: the spans
    decoded before it are read again, once, before their trace is judged.
    """
    if received.pairs >= 0:
        return
    encoded = received.encoded
    _, start = varint(encoded, 0)
    _, start = varint(encoded, start)
    span = Span.FromString(encoded[start:])
    listed = list(span.attributes)
    received.pairs = len(listed)
    received.attributes = attributes_of(listed[:_MAX_DECODED])
    received.events = _events_of(span) if span.events else ()


@functools.lru_cache(maxsize=4)
def _key_finder(wanted: frozenset[str]) -> Callable[[bytes], object]:
    """A search for the bytes a span holds when it has an attribute of one of these keys: its ``KeyValue``'s key field.

    A span whose bytes hold none of them has none of the keys, and one regular
    expression over its bytes is far cheaper than listing its attributes; a span whose
    bytes hold one may still not have it (the bytes can be in a value), so its keys are
    then read. A key written with a longer length varint than needed (legal, but no
    encoder does it) is not found.
    """
    return re.compile(b"|".join(re.escape(frame(1 << 3 | 2, key.encode())) for key in sorted(wanted))).search


def decode_estimate(body_bytes: int, spans: int) -> int:
    """What decoding a request of ``body_bytes`` holding ``spans`` spans costs, about (see :data:`_SPAN_COST`)."""
    return 2 * body_bytes + _SPAN_COST * spans


def _events_of(span: Span) -> tuple[Event, ...]:
    return tuple(
        Event(event.name, cast("Attributes", attributes_of(event.attributes[:_MAX_DECODED])), event.time_unix_nano)
        for event in span.events[:_MAX_DECODED]
    )


def attributes_of(pairs: Iterable[KeyValue]) -> dict[str, object]:
    """OTLP key-values as span attributes; values no attribute can hold (maps, bytes, empty) are left out."""
    out: dict[str, object] = {}
    for pair in pairs:
        value = _python(pair.value)
        if value is not None:
            out[pair.key] = value
    return out


def _python(value: AnyValue) -> object:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return value.double_value
    if which == "array_value":
        items = (_python(item) for item in value.array_value.values[:_MAX_ARRAY])
        return tuple(item for item in items if item is not None and item.__class__ is not tuple)
    return None


def annotated(received: Received, attributes: Mapping[str, object], events: Sequence[Event] = ()) -> bytes:
    """``received``'s framed span bytes with these attributes (replacing any of the same key) and events added.

    The additions are encoded alone and appended to the span's bytes, which the wire
    format reads as appending to its repeated attributes and events. When none of the
    span's own pairs can have one of the new keys (every pair was decoded, and no decoded
    key is among them), the span's own bytes stay as they came; otherwise the span is
    decoded, its pairs of those keys dropped (as the SDK's merge replaces them), and
    encoded again first.
    """
    encoded = received.encoded
    _, start = varint(encoded, 0)
    _, start = varint(encoded, start)
    own = encoded[start:]
    present = received.attributes
    if received.pairs != len(present) or not attributes.keys().isdisjoint(present):
        span = Span.FromString(own)
        pairs = span.attributes
        kept = [pair for pair in pairs if pair.key not in attributes]
        if len(kept) != len(pairs):
            del pairs[:]
            pairs.extend(kept)
            own = span.SerializeToString()
    added = encode_attributes(attributes)
    if events:
        added += encode_events((event.name, event.timestamp, event.attributes or _NOTHING) for event in events)
    return frame(SPAN_TAG, own + added)


def shrink_span(encoded: bytes, budget: int) -> bytes | None:
    """A framed span cut to at most ``budget`` bytes as the SDK's default span limits cut; None if it cannot be.

    First its attributes, events and links past 128 each are dropped (and counted in the
    span's own ``dropped_*_count`` fields); then, as the SDK's attribute value length limit
    does, every string or bytes value longer than a cap is cut to the cap (span, event and
    link attributes alike), the cap halving until the span fits.
    """
    _, start = varint(encoded, 0)
    _, start = varint(encoded, start)
    span = Span.FromString(encoded[start:])
    if len(span.attributes) > _MAX_DECODED:
        span.dropped_attributes_count += len(span.attributes) - _MAX_DECODED
        del span.attributes[_MAX_DECODED:]
    if len(span.events) > _MAX_DECODED:
        span.dropped_events_count += len(span.events) - _MAX_DECODED
        del span.events[_MAX_DECODED:]
    if len(span.links) > _MAX_DECODED:
        span.dropped_links_count += len(span.links) - _MAX_DECODED
        del span.links[_MAX_DECODED:]
    own = span.SerializeToString()
    if len(own) + 16 <= budget:  # 16: the frame's tag and length, generously
        return frame(SPAN_TAG, own)
    pairs = [*span.attributes]
    for event in span.events:
        pairs.extend(event.attributes)
    for link in span.links:
        pairs.extend(link.attributes)
    values = [pair.value for pair in pairs if pair.value.WhichOneof("value") in ("string_value", "bytes_value")]
    cap = max((len(value.string_value) + len(value.bytes_value) for value in values), default=0)
    while cap > 0:
        cap //= 2
        for value in values:
            if value.WhichOneof("value") == "string_value":
                if len(value.string_value) > cap:
                    value.string_value = value.string_value[:cap]
            elif len(value.bytes_value) > cap:
                value.bytes_value = value.bytes_value[:cap]
        own = span.SerializeToString()
        if len(own) + 16 <= budget:
            return frame(SPAN_TAG, own)
    return None


def encode_batch(spans: Iterable[tuple[Origin, bytes]]) -> bytes:
    """One encoded ``ExportTraceServiceRequest`` holding these framed spans, regrouped under their resource and scope.

    The spans' bytes are copied as they are; each resource, and each scope of a resource,
    is written once per request (origins of the same encoded resource and scope share it).
    """
    tree: dict[tuple[bytes | None, bytes], dict[tuple[bytes | None, bytes], list[bytes]]] = {}
    by_origin: dict[int, list[bytes]] = {}  # the spans of one origin are mostly together: one look-up each
    for origin, encoded in spans:
        group = by_origin.get(id(origin))
        if group is None:
            scopes = tree.setdefault((origin.resource, origin.resource_schema), {})
            group = by_origin[id(origin)] = scopes.setdefault((origin.scope, origin.scope_schema), [])
        group.append(encoded)
    return write_request(
        (resource, resource_schema, ((scope, scope_schema, framed) for (scope, scope_schema), framed in scopes.items()))
        for (resource, resource_schema), scopes in tree.items()
    )


def hex_id(value: bytes) -> str:
    """A trace or span id as hex, for a log line."""
    return binascii.hexlify(value).decode("ascii")
