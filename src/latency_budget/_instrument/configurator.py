"""The ``opentelemetry_configurator`` entry point: the SDK's set-up, with budgets in front of each exporter.

Registered in ``pyproject.toml`` as ``latency_budget``; select it with
``OTEL_PYTHON_CONFIGURATOR=latency_budget``.
"""

from __future__ import annotations

import inspect
import os
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk._configuration import _initialize_components, _OTelSDKConfigurator
from opentelemetry.sdk.trace import TracerProvider

from latency_budget._instrument.install import (
    ExportWrapper,
    install_on_provider,
    load_config,
    mark_installed,
    recording_processor,
    report_failure,
)
from latency_budget._instrument.settings import CONFIGURATOR_NAME, read_settings

__all__ = ["LatencyBudgetConfigurator"]

_CONFIGURATOR_GROUP = "opentelemetry_configurator"
_SELECT_CONFIGURATOR = "OTEL_PYTHON_CONFIGURATOR"

# SDK 1.40 added the hook that builds each exporter's span processor.
_HAS_EXPORT_HOOK = "export_span_processor" in inspect.signature(_initialize_components).parameters


class LatencyBudgetConfigurator(_OTelSDKConfigurator):
    """The SDK's default set-up, with :class:`LatencyBudgetProcessor` in front of each span exporter.

    Select it with ``OTEL_PYTHON_CONFIGURATOR=latency_budget``. Without
    ``OTEL_LATENCY_BUDGET_FILE`` (or with ``OTEL_LATENCY_BUDGET_ENABLED=false``) it is
    exactly the SDK's configurator. When nobody selected it and another configurator (a
    distro's) is installed, that one runs instead, and :func:`post_instrument` adds the
    budgets: installing this package never changes which configurator sets up the SDK.
    """

    def _configure(self, **kwargs: Any) -> None:
        other = _unselected_alternative()
        if other is not None:
            other().configure(**kwargs)  # type: ignore[no-untyped-call]
            return
        wrapper = None
        try:
            settings = read_settings()
            config = load_config(settings) if settings is not None else None
            if settings is not None and config is not None:
                wrapper = ExportWrapper(config, settings, kwargs.get("export_span_processor"))
                if _HAS_EXPORT_HOOK:
                    kwargs["export_span_processor"] = wrapper
        except Exception as exc:
            report_failure("configurator", exc)
            wrapper = None
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]
        if wrapper is None:
            return
        try:
            provider = trace.get_tracer_provider()
            if wrapper.processors:
                mark_installed(provider)
            else:
                # No exporter went through the hook (no trace exporter, OTEL_CONFIG_FILE,
                # or an SDK before 1.40): give the finished provider budgets instead.
                install_on_provider(provider, wrapper.config, wrapper.settings)
            # After the routes above, which feed the log and metric sinks: the recording feeds none.
            recording = recording_processor(wrapper.config, wrapper.settings)
            if recording is not None and isinstance(provider, TracerProvider):
                provider.add_span_processor(recording)
        except Exception as exc:
            report_failure("configurator", exc)


def _unselected_alternative() -> type[_OTelSDKConfigurator] | None:
    """Another installed configurator to defer to, when nobody chose this one by name."""
    if os.environ.get(_SELECT_CONFIGURATOR) is not None:
        return None  # chosen by name: opentelemetry-instrument only loads the one named
    for entry_point in entry_points(group=_CONFIGURATOR_GROUP):
        if entry_point.name != CONFIGURATOR_NAME:
            loaded: type[_OTelSDKConfigurator] = entry_point.load()
            return loaded
    return None
