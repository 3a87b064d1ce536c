"""Run the configurator and then the post-instrument hook by hand, with a request after each.

What ``opentelemetry-instrument`` does when it loads this package's configurator although
nobody chose it: the tests check which set-up the first request was exported under.
"""

from __future__ import annotations

from opentelemetry import trace

from latency_budget._instrument import post_instrument
from latency_budget._instrument.configurator import LatencyBudgetConfigurator


def request(name: str) -> None:
    with trace.get_tracer("app").start_as_current_span(name, kind=trace.SpanKind.SERVER):  # an incoming request
        pass


LatencyBudgetConfigurator().configure()
request("after configurator")
post_instrument()
request("after post-instrument hook")
