"""The one place that reads OpenTelemetry SDK internals, for speed, with a public fallback.

``span.attributes`` builds a ``MappingProxyType`` over a ``BoundedAttributes`` whose
``get`` runs through ``collections.abc`` in Python: about a microsecond per lookup. The
processor reads a few attributes of every span, so it reads the SDK's underlying plain
``dict`` instead. At import we check, on a real span, that the internals look as
expected; if they do not (another SDK version), every read uses the public API.
Only reads happen here: nothing in the SDK is modified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider

__all__ = ["FAST_PATH", "attributes_of"]

_EMPTY: Mapping[str, Any] = {}


def _public_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or _EMPTY


def _fast_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    bounded = span._attributes
    inner = getattr(bounded, "_dict", None)
    if inner.__class__ is dict:
        return inner
    return span.attributes or _EMPTY


def _probe() -> bool:
    """Whether a real SDK span exposes its attributes the way _fast_attributes expects."""
    try:
        provider = TracerProvider(shutdown_on_exit=False)
        span = cast(ReadableSpan, provider.get_tracer(__name__).start_span("probe", attributes={"probe.key": 1}))
        inner = getattr(getattr(span, "_attributes", None), "_dict", None)
        ok = inner.__class__ is dict and inner == {"probe.key": 1}
        live = cast(Span, span)
        live.set_attribute("probe.later", True)
        ok = ok and _fast_attributes(span) == dict(span.attributes or {})
        live.end()
        return ok
    except Exception:
        return False


FAST_PATH = _probe()
attributes_of = _fast_attributes if FAST_PATH else _public_attributes
attributes_of.__doc__ = "The span's attributes as a read-only mapping (never None)."
