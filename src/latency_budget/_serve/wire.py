"""The protobuf wire format of an OTLP trace export, as far as serve reads and writes it.

Reading splits an ``ExportTraceServiceRequest`` into its resources, scopes and spans
without decoding the spans: each span stays the bytes it came as, framed as the field
of its ``ScopeSpans`` (tag and length included), so forwarding it is copying those
bytes. Writing joins such framed spans back under their resource and scope. Only the
field numbers of ``opentelemetry/proto/trace/v1/trace.proto`` and the wire format's
own rules (tags, varints, lengths) are used here; anything that breaks them raises
:class:`WireError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

__all__ = [
    "ResourceGroup",
    "ScopeGroup",
    "WireError",
    "encode_attributes",
    "encode_events",
    "frame",
    "read_request",
    "varint",
    "write_request",
]

# Wire types (https://protobuf.dev/programming-guides/encoding/).
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5

# The tags serve reads and writes: field number << 3 | wire type.
_RESOURCE_SPANS = 1 << 3 | _LEN  # ExportTraceServiceRequest.resource_spans
_RESOURCE = 1 << 3 | _LEN  # ResourceSpans.resource
_SCOPE_SPANS = 2 << 3 | _LEN  # ResourceSpans.scope_spans
_SCHEMA_URL = 3 << 3 | _LEN  # ResourceSpans.schema_url, ScopeSpans.schema_url
_SCOPE = 1 << 3 | _LEN  # ScopeSpans.scope
SPAN_TAG = 2 << 3 | _LEN  # ScopeSpans.spans
_ATTRIBUTE = 9 << 3 | _LEN  # Span.attributes
_KEY = 1 << 3 | _LEN  # KeyValue.key
_VALUE = 2 << 3 | _LEN  # KeyValue.value
_STRING = 1 << 3 | _LEN  # AnyValue.string_value
_BOOL = bytes((2 << 3 | _VARINT,))  # AnyValue.bool_value
_INT = bytes((3 << 3 | _VARINT,))  # AnyValue.int_value
_DOUBLE = bytes((4 << 3 | _I64,))  # AnyValue.double_value
_ARRAY = 5 << 3 | _LEN  # AnyValue.array_value
_ITEM = 1 << 3 | _LEN  # ArrayValue.values
_EVENT = 11 << 3 | _LEN  # Span.events
_EVENT_TIME = bytes((1 << 3 | _I64,))  # Span.Event.time_unix_nano
_EVENT_NAME = 2 << 3 | _LEN  # Span.Event.name
_EVENT_ATTRIBUTE = 3 << 3 | _LEN  # Span.Event.attributes
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_INT64 = range(-(2**63), 2**63)
_DOUBLE_VALUE = bytes((_VALUE, 9)) + _DOUBLE  # KeyValue.value holding AnyValue.double_value
# The encoded key fields of the attribute keys written (the contract's, and the budget file's stages: few).
_KEY_FIELDS: dict[str, tuple[bytes, bytes]] = {}
_MAX_KEY_FIELDS = 4096


class WireError(ValueError):
    """Bytes that do not follow the protobuf wire format where serve reads them."""


ScopeGroup = tuple[bytes | None, bytes, list[bytes]]
"""One ``ScopeSpans``: the encoded scope (None: absent), its schema URL (UTF-8 bytes), and its spans, each framed."""

ResourceGroup = tuple[bytes | None, bytes, list[ScopeGroup]]
"""One ``ResourceSpans``: the encoded resource (None: absent), its schema URL (UTF-8 bytes), and its scopes."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` in ``data`` and the position after it."""
    try:
        byte = data[pos]
        if byte < 0x80:
            return byte, pos + 1
        value = byte & 0x7F
        shift = 7
        while True:
            pos += 1
            byte = data[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos + 1
            shift += 7
            if shift > 63:
                raise WireError("a varint longer than 10 bytes")
    except IndexError:
        raise WireError("truncated: the data ends inside a varint") from None


def _skip(data: bytes, pos: int, end: int, wire_type: int, field: int) -> int:
    """The position after a field's value of ``wire_type`` starting at ``pos`` (its tag already read)."""
    if wire_type == _VARINT:
        return varint(data, pos)[1]
    if wire_type == _LEN:
        length, pos = varint(data, pos)
        pos += length
    elif wire_type == _I64:
        pos += 8
    elif wire_type == _I32:
        pos += 4
    elif wire_type == _SGROUP:
        while True:
            if pos >= end:
                raise WireError("truncated: a group without its end")
            tag, pos = varint(data, pos)
            if tag & 7 == _EGROUP:
                if tag >> 3 != field:
                    raise WireError("a group ends with another group's number")
                return pos
            pos = _skip(data, pos, end, tag & 7, tag >> 3)
    else:
        raise WireError(f"wire type {wire_type} where a field was expected")
    if pos > end:
        raise WireError("truncated: a field runs past the end of its message")
    return pos


def _fields(data: bytes, start: int, end: int) -> Iterable[tuple[int, int, int, int]]:
    """Each field in ``data[start:end]``: (tag, start of its tag, start of its value, end of its value).

    For a length-delimited field the value starts after its length.
    """
    pos = start
    while pos < end:
        at = pos
        tag, pos = varint(data, pos)
        wire_type = tag & 7
        if tag >> 3 == 0:
            raise WireError("field number 0")
        if wire_type == _LEN:
            length, pos = varint(data, pos)
            after = pos + length
            if after > end:
                raise WireError("truncated: a field runs past the end of its message")
            yield tag, at, pos, after
            pos = after
        else:
            after = _skip(data, pos, end, wire_type, tag >> 3)
            yield tag, at, pos, after
            pos = after
    if pos != end:
        raise WireError("truncated: a field runs past the end of its message")


def read_request(body: bytes) -> list[ResourceGroup]:
    """The resources, scopes and framed spans of an encoded ``ExportTraceServiceRequest``, in order.

    A message field that occurs more than once (a resource or scope sent in parts) is
    the concatenation of its parts, which the wire format reads as their merge; of a
    repeated schema URL the last counts. Fields serve does not know are skipped.
    """
    groups: list[ResourceGroup] = []
    for tag, _, start, end in _fields(body, 0, len(body)):
        if tag != _RESOURCE_SPANS:
            continue
        resource: list[bytes] = []
        resource_schema = b""
        scopes: list[ScopeGroup] = []
        for rtag, _, rstart, rend in _fields(body, start, end):
            if rtag == _SCOPE_SPANS:
                scopes.append(_read_scope_spans(body, rstart, rend))
            elif rtag == _RESOURCE:
                resource.append(body[rstart:rend])
            elif rtag == _SCHEMA_URL:
                resource_schema = body[rstart:rend]
        groups.append((b"".join(resource) if resource else None, resource_schema, scopes))
    return groups


def _read_scope_spans(body: bytes, start: int, end: int) -> ScopeGroup:
    scope: list[bytes] = []
    schema = b""
    spans: list[bytes] = []
    for tag, at, value, after in _fields(body, start, end):
        if tag == SPAN_TAG:
            spans.append(body[at:after])
        elif tag == _SCOPE:
            scope.append(body[value:after])
        elif tag == _SCHEMA_URL:
            schema = body[value:after]
    return (b"".join(scope) if scope else None), schema, spans


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(tag: int, value: bytes) -> bytes:
    """``value`` as a length-delimited field of tag ``tag`` (a field number << 3 | 2)."""
    length = len(value)
    if length < 0x80 and tag < 0x80:  # most fields: a byte of tag, a byte of length
        return bytes((tag, length)) + value
    return _varint_bytes(tag) + _varint_bytes(length) + value


def write_request(
    groups: Iterable[tuple[bytes | None, bytes, Iterable[tuple[bytes | None, bytes, Iterable[bytes]]]]],
) -> bytes:
    """An encoded ``ExportTraceServiceRequest`` of these resources (encoded, schema URL) and scopes, with framed spans.

    An absent (None) resource or scope is not written, and neither is an empty schema URL
    (proto3's default), so what :func:`read_request` read is written back as it came.
    """
    out: list[bytes] = []
    for resource, resource_schema, scopes in groups:
        parts = [frame(_RESOURCE, resource)] if resource is not None else []
        for scope, scope_schema, spans in scopes:
            body = (frame(_SCOPE, scope) if scope is not None else b"") + b"".join(spans)
            if scope_schema:
                body += frame(_SCHEMA_URL, scope_schema)
            parts.append(frame(_SCOPE_SPANS, body))
        if resource_schema:
            parts.append(frame(_SCHEMA_URL, resource_schema))
        out.append(frame(_RESOURCE_SPANS, b"".join(parts)))
    return b"".join(out)


def encode_attributes(attributes: Mapping[str, object]) -> bytes:
    """``attributes`` as ``Span.attributes`` fields, in order: appended to an encoded span, they extend its attributes.

    Values as the attribute contract writes them (str, bool, int, float, tuples of them;
    anything else as its ``str``), encoded as the protobuf library encodes the same
    ``KeyValue`` messages.
    """
    out: list[bytes] = []
    append = out.append
    heads = _KEY_FIELDS
    for key, value in attributes.items():
        known = heads.get(key)
        if known is None:
            known = _key_fields(key)
            if len(heads) < _MAX_KEY_FIELDS:
                heads[key] = known
        if value.__class__ is float:  # most of a verdict: a fixed-size value, after a prefix made once per key
            append(known[1] + _pack_double(value))
        else:
            append(frame(_ATTRIBUTE, known[0] + frame(_VALUE, _any_value(value))))
    return b"".join(out)


def encode_events(events: Iterable[tuple[str, int, Mapping[str, object]]]) -> bytes:
    """Events (name, time in ns, attributes) as ``Span.events`` fields: appended to a span, they extend its events.

    Encoded as the protobuf library encodes the same ``Span.Event`` messages (fields in
    number order, proto3 defaults left out).
    """
    out: list[bytes] = []
    for name, time_ns, attributes in events:
        body = _EVENT_TIME + _pack_fixed64(time_ns & 0xFFFF_FFFF_FFFF_FFFF) if time_ns else b""
        if name:
            body += frame(_EVENT_NAME, name.encode())
        for key, value in attributes.items():
            body += frame(_EVENT_ATTRIBUTE, _key_field(key) + frame(_VALUE, _any_value(value)))
        out.append(frame(_EVENT, body))
    return b"".join(out)


def _key_field(key: str) -> bytes:
    return frame(_KEY, key.encode()) if key else b""  # an empty key is proto3's default: not written


def _key_fields(key: str) -> tuple[bytes, bytes]:
    """The key field of a ``KeyValue`` of ``key``, and all of an attribute field of it but a double's 8 bytes."""
    head = _key_field(key)
    float_field = frame(_ATTRIBUTE, head + _DOUBLE_VALUE + bytes(8))[:-8]
    return head, float_field


def _any_value(value: object) -> bytes:
    kind = value.__class__
    if kind is str:
        return frame(_STRING, value.encode())  # type: ignore[attr-defined]
    if kind is float:
        return _DOUBLE + _pack_double(value)
    if kind is bool:
        return _BOOL + (b"\x01" if value else b"\x00")
    if kind is int:
        if value not in _INT64:
            raise ValueError(f"integer attribute value out of the int64 range: {value}")
        return _INT + _varint_bytes(value & 0xFFFF_FFFF_FFFF_FFFF)  # type: ignore[operator]
    if isinstance(value, tuple):
        return frame(_ARRAY, b"".join(frame(_ITEM, _any_value(item)) for item in value))
    return frame(_STRING, str(value).encode())
