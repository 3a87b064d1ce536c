"""Zero-code enablement: budgets for applications run under ``opentelemetry-instrument``.

Set ``OTEL_LATENCY_BUDGET_FILE=budgets.yaml`` and, for full annotations,
``OTEL_PYTHON_CONFIGURATOR=latency_budget``::

    OTEL_PYTHON_CONFIGURATOR=latency_budget OTEL_LATENCY_BUDGET_FILE=budgets.yaml \\
        opentelemetry-instrument python app.py

``configurator.LatencyBudgetConfigurator`` wraps each span exporter's processor in
:class:`LatencyBudgetProcessor`; :func:`post_instrument` covers set-ups where another
configurator built the SDK. ``install`` holds what both share, ``settings`` the
environment variables.
"""

from latency_budget._instrument.hook import post_instrument
from latency_budget._instrument.settings import CONFIGURATOR_NAME, Settings, read_settings

__all__ = ["CONFIGURATOR_NAME", "Settings", "post_instrument", "read_settings"]
