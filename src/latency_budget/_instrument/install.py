"""Putting :class:`LatencyBudgetProcessor` into an SDK that ``opentelemetry-instrument`` set up.

Two ways in, one bookkeeping: the configurator wraps each exporting span processor as
the SDK builds it; the post-instrument hook, which only sees a finished provider, wraps
the exporting processors it can find in it (through SDK internals, checked first), and
otherwise adds a processor whose only outputs are the live stage attributes and the
violation logs and metrics. A provider is only ever given budgets once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from latency_budget import _guard
from latency_budget._config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget._instrument.settings import ENV_FILE, ENV_TRACES_FILE, Settings
from latency_budget._processor import LatencyBudgetProcessor, ReportCallback

__all__ = [
    "ExportWrapper",
    "InstallResult",
    "install_on_provider",
    "load_config",
    "mark_installed",
    "recording_processor",
    "report_failure",
    "report_sinks",
]

InstallResult = Literal["wrapped", "added", "present", "unavailable"]

_lock = threading.Lock()
_installed: weakref.WeakSet[TracerProvider] = weakref.WeakSet()


def load_config(settings: Settings) -> BudgetConfig | None:
    """The budget file named by the settings, or ``None`` (logged once) when it is unusable.

    Zero-code enablement must not cost the application its telemetry: a broken budget file
    turns budgets off, and the SDK is set up as if they had never been asked for.
    """
    try:
        return load_budgets(settings.file)
    except BudgetConfigError as exc:
        _guard.log_once(
            ("budget-file", settings.file, str(exc)),
            logging.ERROR,
            "latency_budget: %s: %s; latency budgets are off",
            ENV_FILE,
            exc,
        )
        return None


def report_sinks(settings: Settings) -> list[ReportCallback]:
    """The log and metric sinks the settings ask for, on the global providers (hint log
    records wherever violation log records go, unless ``OTEL_LATENCY_BUDGET_HINT_LOGS_ENABLED=false``).

    Built before the SDK sets its logger and meter providers is fine: the API's proxies
    forward to them once they are set.
    """
    from latency_budget.export.sinks import report_sinks as sinks  # noqa: PLC0415 (only when enabled)

    return sinks(logs=settings.logs, metrics=settings.metrics)


def _budget_processor(
    config: BudgetConfig, settings: Settings, downstream: SpanProcessor, sinks: list[ReportCallback]
) -> LatencyBudgetProcessor:
    return LatencyBudgetProcessor(
        config,
        downstream,
        on_report=sinks,
        max_active_traces=settings.max_active_traces,
        max_spans_per_trace=settings.max_spans_per_trace,
        idle_ttl_s=settings.idle_ttl_s,
    )


def recording_processor(config: BudgetConfig, settings: Settings) -> SpanProcessor | None:
    """The budget processor in front of the file that ``OTEL_LATENCY_BUDGET_TRACES_FILE`` names, or None.

    It feeds no log or metric sinks: the budget processor in front of the application's own
    exporter does. A file that cannot be opened is logged once and not recorded.
    """
    if settings.traces_file is None:
        return None
    from latency_budget.export.file import OtlpJsonFileSpanExporter  # noqa: PLC0415 (only when asked for)

    try:
        exporter = OtlpJsonFileSpanExporter(settings.traces_file)
    except OSError as exc:
        _guard.log_once(
            ("traces-file", settings.traces_file),
            logging.ERROR,
            "latency_budget: %s=%r cannot be written (%s); spans are not recorded",
            ENV_TRACES_FILE,
            settings.traces_file,
            exc.strerror or exc,
        )
        return None
    return _budget_processor(config, settings, BatchSpanProcessor(exporter), [])


class ExportWrapper:
    """The SDK configurator's ``export_span_processor``: budgets in front of each exporter.

    Each exporter gets its own processor (the SDK adds them one by one); only the first
    feeds the ``sinks`` (default: the log and metric sinks the settings ask for), so a
    second exporter does not double the records. ``inner`` builds the exporting processor
    (default ``BatchSpanProcessor``, as in the SDK).
    """

    def __init__(
        self,
        config: BudgetConfig,
        settings: Settings,
        inner: Callable[..., SpanProcessor] | None = None,
        *,
        sinks: list[ReportCallback] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self._inner: Callable[..., SpanProcessor] = inner or BatchSpanProcessor
        self._sinks = sinks
        self.processors: list[LatencyBudgetProcessor] = []

    def __call__(self, span_exporter: SpanExporter, *args: Any, **kwargs: Any) -> SpanProcessor:
        downstream = self._inner(span_exporter, *args, **kwargs)
        sinks: list[ReportCallback] = []
        if not self.processors:
            sinks = report_sinks(self.settings) if self._sinks is None else self._sinks
        processor = _budget_processor(self.config, self.settings, downstream, sinks)
        self.processors.append(processor)
        return processor


def mark_installed(provider: object) -> None:
    """Remember that ``provider`` has budgets, so the other route leaves it alone."""
    if isinstance(provider, TracerProvider):
        with _lock:
            _installed.add(provider)


def install_on_provider(
    provider: object, config: BudgetConfig, settings: Settings, *, sinks: list[ReportCallback] | None = None
) -> InstallResult:
    """Give an existing SDK ``provider`` budgets, unless it has them already.

    Returns ``"present"`` (nothing done), ``"wrapped"`` (its exporting processors now sit
    behind budget processors: full annotations), ``"added"`` (a processor was added that
    sets stage attributes and feeds the log and metric sinks, but cannot annotate what
    the provider's own processors export) or ``"unavailable"`` (not an SDK provider).
    ``sinks`` default to the log and metric sinks the settings ask for.
    """
    if not isinstance(provider, TracerProvider):
        return "unavailable"
    with _lock:
        if provider in _installed:
            return "present"
        _installed.add(provider)
        registry = _ProcessorRegistry.of(provider)
        if registry is not None and any(isinstance(p, LatencyBudgetProcessor) for p in registry.processors()):
            return "present"
        chosen = report_sinks(settings) if sinks is None else sinks
        if registry is not None and registry.wrap_exporting(
            lambda exporting, first: _budget_processor(config, settings, exporting, chosen if first else [])
        ):
            return "wrapped"
    provider.add_span_processor(_budget_processor(config, settings, _NoExport(), chosen))
    return "added"


class _NoExport(SpanProcessor):
    """The downstream of a budget processor that only feeds sinks: the provider exports."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class _ProcessorRegistry:
    """The span processors of an SDK provider, read and replaced through SDK internals.

    ``TracerProvider`` has no public way to list or replace its processors. Its
    multi-processor keeps them in a tuple (``_span_processors``, swapped whole under
    ``_lock``) in every SDK release this package supports; :meth:`of` checks that shape
    and returns ``None`` when it differs, and callers fall back to the public API.
    """

    def __init__(self, multi: Any) -> None:
        self._multi = multi

    @classmethod
    def of(cls, provider: TracerProvider) -> _ProcessorRegistry | None:
        multi = getattr(provider, "_active_span_processor", None)
        processors = getattr(multi, "_span_processors", None)
        lock = getattr(multi, "_lock", None)
        if not isinstance(processors, tuple) or not hasattr(lock, "__enter__"):
            return None
        return cls(multi)

    def processors(self) -> tuple[SpanProcessor, ...]:
        processors: tuple[SpanProcessor, ...] = self._multi._span_processors
        return processors

    def wrap_exporting(self, wrap: Callable[[SpanProcessor, bool], SpanProcessor]) -> bool:
        """Replace each exporting processor ``p`` by ``wrap(p, first)``; whether there was one."""
        with self._multi._lock:
            replaced: list[SpanProcessor] = []
            found = False
            for processor in self._multi._span_processors:
                if isinstance(processor, (BatchSpanProcessor, SimpleSpanProcessor)):
                    processor = wrap(processor, not found)  # noqa: PLW2901
                    found = True
                replaced.append(processor)
            if found:
                self._multi._span_processors = tuple(replaced)
        return found


def report_failure(where: str, exc: Exception) -> None:
    """Log (once) that zero-code set-up failed and budgets are off; re-raised only under our own tests."""
    _guard.log_once(
        ("instrument", where, type(exc)),
        logging.ERROR,
        "latency_budget: the %s failed (%r); latency budgets are off",
        where,
        exc,
    )
    if _guard.raise_internal_errors:
        raise exc
