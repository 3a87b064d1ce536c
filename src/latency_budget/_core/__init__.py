"""The accounting core, free of OpenTelemetry SDK state: per-trace state, tallies, critical path,
hints, first token, evaluation, the report and the attributes it becomes.

Everything here is internal; the public names are re-exported from :mod:`latency_budget`.
"""
