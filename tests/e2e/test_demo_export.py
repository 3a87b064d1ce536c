"""End to end: ``latency-budget demo --otlp-endpoint``, what the compose ``demo`` service runs, into the real stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from latency_budget._demo import example_budgets, run_demo

from .services import CollectorService, JaegerService, poll
from .signals import collector_log_records, prometheus_samples, total

pytestmark = pytest.mark.e2e

REQUESTS = 20
SEED = 7
DELIVERY_TIMEOUT_S = 60.0


def test_demo_sends_traces_violation_logs_and_metrics_to_the_collector(
    otel_collector_keep_all: CollectorService, jaeger: JaegerService, service_name: str
) -> None:
    """`demo --otlp-endpoint ... --requests 20 --seed 7` exits 0; traces, violation and hint logs, metrics arrive."""
    collector = otel_collector_keep_all
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SERVICE_NAME"] = service_name
    argv = ["demo", "--otlp-endpoint", collector.otlp_grpc_endpoint, "--requests", str(REQUESTS), "--seed", str(SEED)]
    result = subprocess.run(
        [sys.executable, "-m", "latency_budget", *argv, "--show", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    # The same seed in-process: the same trace ids and verdicts, whatever the threads did.
    expected = run_demo(example_budgets(), requests=REQUESTS, seed=SEED)
    trace_ids = {f"{trace_id:032x}" for trace_id in expected.trace_ids}
    violated = {f"{r.trace_id:032x}" for r in expected.reports if r is not None and r.violated}
    with_violations = {f"{r.trace_id:032x}" for r in expected.reports if r is not None and r.violations}
    # Hints read from a trace's shape are the same in every run; those estimated from recent calls
    # depend on the order in which the threads ended the requests, so only their bounds are known.
    shaped = {"sequential_calls", "iterations"}
    with_shape_hints = {
        f"{r.trace_id:032x}" for r in expected.reports if r is not None and any(h.kind in shaped for h in r.hints)
    }

    assert result.returncode == 0, result.stderr
    assert re.search(
        rf"^Exported \d+ spans to {re.escape(collector.otlp_grpc_endpoint)} \(OTLP grpc\)", result.stderr, re.M
    )
    assert violated, "the seed should break some budgets"

    def traces_stored() -> set[str] | None:
        ids = {str(t["traceID"]) for t in jaeger.find_traces(service=service_name, limit="100")}
        return ids if ids == trace_ids else None

    def logged(event: str, expected: set[str], *, at_least: bool = False) -> set[str] | None:
        records = collector_log_records(collector.logs_file)
        ids = {
            str(r.record["traceId"])
            for r in records
            if r.resource.get("service.name") == service_name and r.record.get("eventName") == event
        }
        return ids if ids == expected or (at_least and expected <= ids <= trace_ids) else None

    def requests_counted() -> float | None:
        samples = prometheus_samples(collector.scrape(), service_name=service_name)
        count = total(samples, "latency_budget_trace_duration_milliseconds_count")
        return count if count == REQUESTS else None

    poll(traces_stored, timeout=DELIVERY_TIMEOUT_S, what=f"the demo's {REQUESTS} traces in Jaeger")
    found = jaeger.find_traces(service=service_name, limit="100", tags=json.dumps({"latency_budget.violated": "true"}))
    assert {str(t["traceID"]) for t in found} == violated
    poll(
        lambda: logged("latency_budget.violation", with_violations),
        timeout=DELIVERY_TIMEOUT_S,
        what="a violation log record per request that broke a budget",
    )
    assert with_shape_hints, "the seed should run some tool calls one after another"
    poll(
        lambda: logged("latency_budget.hint", with_shape_hints, at_least=True),
        timeout=DELIVERY_TIMEOUT_S,
        what="hint log records for the requests with sequential calls or extra iterations",
    )
    poll(requests_counted, timeout=DELIVERY_TIMEOUT_S, what="every demo request counted on the Prometheus endpoint")
