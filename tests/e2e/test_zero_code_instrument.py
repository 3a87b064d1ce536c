"""Zero-code enablement end to end: ``opentelemetry-instrument`` -> OTLP -> real Collector -> Jaeger.

The app of ``tests/instrumentation/apps/agent.py`` (real ``openai`` client, both installed
OpenAI instrumentations, a GenAI-utils tool span) runs under ``opentelemetry-instrument``
with only environment variables set: the OTLP exporters of the SDK, a budget file with
no ``stages:``, and the configurator chosen or not. Its request breaks its tiny total,
so the collector's tail sampler keeps it, and the annotations, the violation log record
and the violation counter must arrive.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..instrumentation.fake_openai import FakeOpenAIServer, serve
from ..instrumentation.running import AGENT_APP, TOTALS_ONLY_YAML, VIOLATION, clean_environment, run_instrumented
from .services import CollectorService, JaegerService, poll

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0
MODEL_SPANS = 4  # both instrumentations wrap each of the app's two completions ...
MODEL_CALLS = 2  # ... nested in pairs: two model calls (one call is one call)


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server on a free loopback port."""
    with serve() as server:
        yield server


def _tags(items: object) -> dict[str, Any]:
    return {item["key"]: item["value"] for item in items} if isinstance(items, list) else {}


def _otlp_value(value: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    return int(value["intValue"]) if "intValue" in value else None


@pytest.mark.parametrize("configurator", ["latency_budget", "configurator"], ids=["our-configurator", "distro+hook"])
def test_annotations_log_and_metric_arrive_over_otlp(
    otel_collector: CollectorService,
    jaeger: JaegerService,
    fake_openai: FakeOpenAIServer,
    tmp_path: Path,
    configurator: str,
) -> None:
    """The instrumented app's root span, violation record and counter reach Jaeger, the log file and Prometheus."""
    service = f"e2e-zero-code-{uuid.uuid4().hex[:10]}"
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(TOTALS_ONLY_YAML, encoding="utf-8")
    env = clean_environment(
        OPENAI_BASE_URL=fake_openai.base_url,
        OPENAI_API_KEY="dummy-key",
        OTEL_SERVICE_NAME=service,
        OTEL_PYTHON_CONFIGURATOR=configurator,
        OTEL_LATENCY_BUDGET_FILE=str(budgets),
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_LOGS_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=otel_collector.otlp_grpc_endpoint,
        OTEL_EXPORTER_OTLP_INSECURE="true",
    )
    done = run_instrumented(AGENT_APP, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "latency_budget:" not in done.stderr

    tags = json.dumps({"latency_budget.violated": "true"})
    [found] = poll(
        lambda: jaeger.find_traces(service=service, tags=tags) or None,
        timeout=DELIVERY_TIMEOUT_S,
        what="the annotated trace in Jaeger",
    )
    spans = found["spans"]
    [root] = [span for span in spans if span["operationName"] == "POST /ask"]
    annotations = _tags(root["tags"])
    assert annotations["latency_budget.violated"] is True
    assert annotations["latency_budget.stages.model_call.count"] == MODEL_CALLS
    assert annotations["latency_budget.stages.tool_calls.count"] == 1
    assert annotations["latency_budget.total.budget_ms"] == 0.001
    events = [_tags(log["fields"]) for log in root.get("logs") or []]
    assert [e["latency_budget.kind"] for e in events if e.get("event") == VIOLATION] == ["total"]
    stages = sorted(_tags(span["tags"]).get("latency_budget.stage", "-") for span in spans if span is not root)
    assert stages == ["model_call"] * MODEL_SPANS + ["tool_calls"]

    def violation_record() -> dict[str, Any] | None:
        if not otel_collector.logs_file.exists():
            return None
        for line in otel_collector.logs_file.read_text().splitlines():
            for resource in json.loads(line)["resourceLogs"]:
                resource_attributes = {a["key"]: _otlp_value(a["value"]) for a in resource["resource"]["attributes"]}
                if resource_attributes.get("service.name") != service:
                    continue
                for scoped in resource["scopeLogs"]:
                    for record in scoped["logRecords"]:
                        if record.get("eventName") == VIOLATION:
                            return dict(record)
        return None

    record = poll(violation_record, timeout=DELIVERY_TIMEOUT_S, what="the violation log record in the log file")
    assert record["traceId"] == found["traceID"].rjust(32, "0")
    assert record["severityText"] == "ERROR"

    def violation_count() -> float | None:
        for line in otel_collector.scrape().splitlines():
            if line.startswith("latency_budget_violations_total{") and f'service_name="{service}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return None

    assert poll(violation_count, timeout=DELIVERY_TIMEOUT_S, what="the violation counter on Prometheus") == 1.0
