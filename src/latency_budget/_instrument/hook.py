"""The ``opentelemetry_post_instrument`` entry point: budgets for a provider another configurator built.

Registered in ``pyproject.toml`` as ``latency_budget``. It runs in every application
started by ``opentelemetry-instrument`` where this package is installed, so it imports
nothing beyond the SDK's public API and returns at once when no budget file is set.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

from latency_budget import _guard
from latency_budget._instrument.install import install_on_provider, load_config, recording_processor, report_failure
from latency_budget._instrument.settings import CONFIGURATOR_NAME, read_settings

__all__ = ["post_instrument"]


def post_instrument(**_: object) -> None:
    """``opentelemetry_post_instrument`` hook: budgets for the global SDK provider, if it has none.

    Runs after every configurator, so it covers users who keep another distro or
    configurator, and does nothing where the ``latency_budget`` configurator already did
    the work. Never raises.
    """
    try:
        settings = read_settings()
        if settings is None:
            return
        config = load_config(settings)
        if config is None:
            return
        provider = trace.get_tracer_provider()
        result = install_on_provider(provider, config, settings)
        if result in ("wrapped", "added"):
            recording = recording_processor(config, settings)
            if recording is not None:
                provider.add_span_processor(recording)  # type: ignore[attr-defined]
        if result == "added":
            _guard.log_once(
                "post-instrument-added",
                logging.WARNING,
                "latency_budget: the tracer provider's exporting span processors could not be found; budgets "
                "are checked, logged and measured, but exported spans carry only the stage attributes "
                "(OTEL_PYTHON_CONFIGURATOR=%s gives full annotations)",
                CONFIGURATOR_NAME,
            )
        elif result == "unavailable":
            _guard.log_once(
                "post-instrument-unavailable",
                logging.WARNING,
                "latency_budget: no OpenTelemetry SDK tracer provider was set up by the time instrumentation "
                "finished; latency budgets are off (add LatencyBudgetProcessor where the provider is built)",
            )
    except Exception as exc:
        report_failure("post-instrument hook", exc)
