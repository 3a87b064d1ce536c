"""Collect the spans started inside a block, from whichever tracer provider the code uses.

* **An SDK provider is set globally** (or passed in): a collecting processor is added to
  it once and stays, inert, afterwards. The SDK has no ``remove_span_processor``, so the
  collector is activated and deactivated instead: outside a block its hooks return
  after one empty-tuple test, and it never exports anything.
* **No provider is set** (the global is OpenTelemetry's ``ProxyTracerProvider``): a
  temporary provider is installed for the block and removed afterwards. The API sets
  the global once per process, so removing it resets ``opentelemetry.trace``'s private
  ``_TRACER_PROVIDER`` and ``_TRACER_PROVIDER_SET_ONCE``, as OpenTelemetry's own test
  utilities do (``reset_trace_globals``). A module-level ``ProxyTracer`` first used
  during the block keeps the tracer it got there for good; that tracer looks up the
  global provider at each span start, so after the block it records nothing (as
  before the block) and follows whatever provider is set globally later. While the
  temporary provider is in place, a ``trace.set_tracer_provider`` call from the code
  under test is refused by the API, with its usual warning.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.util import types
from opentelemetry.util._once import Once

__all__ = ["Capture", "capture_spans"]

_SpanKey = tuple[int, int]  # (trace id, span id)


class Capture:
    """The spans of one block: those started while it was open and ended by its close."""

    __slots__ = ("open", "spans")

    def __init__(self) -> None:
        self.open: set[_SpanKey] = set()
        self.spans: list[ReadableSpan] = []


class _Collector(SpanProcessor):
    """Hands each span to every open capture that saw it start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._captures: tuple[Capture, ...] = ()

    def activate(self, capture: Capture) -> None:
        with self._lock:
            self._captures = (*self._captures, capture)

    def deactivate(self, capture: Capture) -> None:
        with self._lock:
            self._captures = tuple(c for c in self._captures if c is not capture)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        captures = self._captures
        if not captures or span.context is None:
            return
        key = (span.context.trace_id, span.context.span_id)
        with self._lock:
            for capture in captures:
                capture.open.add(key)

    def on_end(self, span: ReadableSpan) -> None:
        captures = self._captures
        if not captures or span.context is None:
            return
        key = (span.context.trace_id, span.context.span_id)
        with self._lock:
            for capture in captures:
                if key in capture.open:
                    capture.open.discard(key)
                    capture.spans.append(span)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


_COLLECTOR = _Collector()
_state_lock = threading.Lock()
_attached: weakref.WeakSet[Any] = weakref.WeakSet()  # providers that hold _COLLECTOR
_attached_ids: set[int] = set()  # for providers that cannot be weakly referenced
_temporary: _TemporaryProvider | None = None
_temporary_users = 0


@contextmanager
def capture_spans(tracer_provider: trace.TracerProvider | None = None) -> Iterator[Capture]:
    """Collect the spans started while the ``with`` block runs (on any thread).

    ``tracer_provider`` defaults to the global one; see the module docstring for what
    happens when none is set.
    """
    release = _attach(tracer_provider)
    capture = Capture()
    _COLLECTOR.activate(capture)
    try:
        yield capture
    finally:
        _COLLECTOR.deactivate(capture)
        release()


def _attach(explicit: trace.TracerProvider | None) -> Callable[[], None]:
    """Make sure spans reach the collector; returns what undoes any temporary change."""
    global _temporary, _temporary_users
    with _state_lock:
        provider = explicit if explicit is not None else trace.get_tracer_provider()
        if provider is _temporary and _temporary is not None:
            _temporary_users += 1
            return _release_temporary
        if explicit is None and isinstance(provider, trace.ProxyTracerProvider):
            if not _can_reset_global():
                raise RuntimeError(
                    "no global tracer provider is set and this OpenTelemetry version does not let one be "
                    "installed temporarily; set one, or pass tracer_provider="
                )
            _temporary = _TemporaryProvider()
            _temporary_users = 1
            trace.set_tracer_provider(_temporary)
            return _release_temporary
        add = getattr(provider, "add_span_processor", None)
        if add is None:
            raise TypeError(
                f"cannot collect spans from a {type(provider).__name__}: it takes no span processors "
                "(use an OpenTelemetry SDK TracerProvider, or pass tracer_provider=)"
            )
        if not _is_attached(provider):
            add(_COLLECTOR)
            _mark_attached(provider)
        return _nothing


def _is_attached(provider: object) -> bool:
    try:
        return provider in _attached
    except TypeError:
        return id(provider) in _attached_ids


def _mark_attached(provider: object) -> None:
    try:
        _attached.add(provider)
    except TypeError:
        _attached_ids.add(id(provider))


def _nothing() -> None:
    return None


def _release_temporary() -> None:
    global _temporary, _temporary_users
    with _state_lock:
        _temporary_users -= 1
        if _temporary_users > 0 or _temporary is None:
            return
        if trace._TRACER_PROVIDER is _temporary:
            trace._TRACER_PROVIDER = None
            trace._TRACER_PROVIDER_SET_ONCE = Once()
        _temporary.sdk.shutdown()
        _temporary = None


def _can_reset_global() -> bool:
    return hasattr(trace, "_TRACER_PROVIDER") and isinstance(getattr(trace, "_TRACER_PROVIDER_SET_ONCE", None), Once)


class _TemporaryProvider(trace.TracerProvider):
    """The global provider while a block runs with none set: an SDK provider feeding only the collector."""

    def __init__(self) -> None:
        self.sdk = SdkTracerProvider(shutdown_on_exit=False)
        self.sdk.add_span_processor(_COLLECTOR)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace.Tracer:
        return _FollowingTracer(
            self, (instrumenting_module_name, instrumenting_library_version, schema_url, attributes)
        )


class _FollowingTracer(trace.Tracer):
    """Uses the tracer provider that is global when each span starts: it records while a temporary provider is."""

    def __init__(self, owner: _TemporaryProvider, key: tuple[str, str | None, str | None, types.Attributes]) -> None:
        self._key = key
        self._provider: trace.TracerProvider = owner
        self._tracer = owner.sdk.get_tracer(*key)

    def _target(self) -> trace.Tracer:
        current = trace.get_tracer_provider()
        if current is not self._provider:
            self._provider = current
            self._tracer = (
                current.sdk.get_tracer(*self._key)
                if isinstance(current, _TemporaryProvider)
                else current.get_tracer(*self._key)
            )
        return self._tracer

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self._target().start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )

    def start_as_current_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Any:
        # The target's own context manager, which also works as a decorator (sync and async).
        return self._target().start_as_current_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception, end_on_exit
        )
