"""Zero-code enablement: the real ``opentelemetry-instrument`` running a real openai-client app.

Each test runs ``tests/instrumentation/apps/agent.py`` in a subprocess, with both
installed OpenAI instrumentations (OpenTelemetry's openai-v2 and OpenInference's), the
SDK's console exporters, and the fake OpenAI server of this session on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .fake_openai import FakeOpenAIServer
from .running import AGENT_APP, APPS, VIOLATION, Exported, budget_attributes, run_with_console_exporters

# Both installed instrumentations wrap each of the app's two completions: four LLM spans,
# nested in pairs, so two model calls (one call is one call).
MODEL_SPANS = 4
MODEL_CALLS = 2


def violation_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [event for event in span["events"] if event["name"] == VIOLATION]


def assert_annotated_once(run: Exported) -> None:
    """The request's root carries the budget report once, and its stage spans are labelled."""
    root = run.root()
    attributes = root["attributes"]
    assert attributes["latency_budget.violated"] is True
    assert attributes["latency_budget.profile"] == "default"
    assert attributes["latency_budget.stages.model_call.count"] == MODEL_CALLS
    assert attributes["latency_budget.stages.tool_calls.count"] == 1
    assert [event["attributes"]["latency_budget.kind"] for event in violation_events(root)] == ["total"]
    stages = sorted(span["attributes"].get("latency_budget.stage", "-") for span in run.spans if span is not root)
    assert stages == ["model_call"] * MODEL_SPANS + ["tool_calls"]


@pytest.mark.parametrize(
    "configurator",
    [
        pytest.param("latency_budget", id="our-configurator-and-hook"),
        pytest.param("configurator", id="distro-configurator-then-hook"),
        pytest.param("", id="no-configurator-chosen"),
    ],
)
def test_root_log_and_metric_exactly_once_whichever_configurator_runs(
    fake_openai: FakeOpenAIServer, totals_only: Path, tmp_path: Path, configurator: str
) -> None:
    """Our configurator, opentelemetry-distro's then our hook, or none chosen: one annotation, record, count."""
    run = run_with_console_exporters(
        AGENT_APP,
        fake_openai.base_url,
        totals_only,
        cwd=tmp_path,
        OTEL_PYTHON_CONFIGURATOR=configurator,
        OTEL_LOGS_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
    )
    assert_annotated_once(run)
    root = run.root()
    [record] = run.violation_records()
    assert (record["trace_id"], record["span_id"]) == (root["context"]["trace_id"], root["context"]["span_id"])
    assert record["attributes"]["latency_budget.kind"] == "total"
    [violations] = run.metric_points("latency_budget", "latency_budget.violations")
    assert violations["value"] == 1
    assert violations["attributes"] == {
        "latency_budget.stage": "total",
        "latency_budget.kind": "total",
        "latency_budget.severity": "error",
    }
    assert "latency_budget:" not in run.stderr  # none of our warnings: every route found what it needed


def test_disabled_by_environment_leaves_telemetry_untouched(
    fake_openai: FakeOpenAIServer, totals_only: Path, tmp_path: Path
) -> None:
    """OTEL_LATENCY_BUDGET_ENABLED=false: the SDK is set up as usual and no span has budget attributes."""
    run = run_with_console_exporters(
        AGENT_APP,
        fake_openai.base_url,
        totals_only,
        cwd=tmp_path,
        OTEL_PYTHON_CONFIGURATOR="latency_budget",
        OTEL_LATENCY_BUDGET_ENABLED="FALSE",
    )
    assert len(run.spans) == MODEL_SPANS + 2
    assert all(not budget_attributes(span) for span in run.spans)


def test_without_budget_file_the_configurator_is_the_sdks(fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """Selected but with no OTEL_LATENCY_BUDGET_FILE, the configurator exports exactly what the SDK's would."""
    run = run_with_console_exporters(
        AGENT_APP, fake_openai.base_url, None, cwd=tmp_path, OTEL_PYTHON_CONFIGURATOR="latency_budget"
    )
    assert len(run.spans) == MODEL_SPANS + 2
    assert all(not budget_attributes(span) for span in run.spans)


def test_bad_setting_warns_once_and_uses_the_default(
    fake_openai: FakeOpenAIServer, totals_only: Path, tmp_path: Path
) -> None:
    """A malformed OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES logs one warning; budgets still apply."""
    run = run_with_console_exporters(
        AGENT_APP,
        fake_openai.base_url,
        totals_only,
        cwd=tmp_path,
        OTEL_PYTHON_CONFIGURATOR="latency_budget",
        OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES="lots",
    )
    warnings = [line for line in run.stderr.splitlines() if "OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES" in line]
    assert warnings == [
        "latency_budget: OTEL_LATENCY_BUDGET_MAX_ACTIVE_TRACES='lots' is not a positive integer; "
        "using the default, 10000"
    ]
    assert_annotated_once(run)


def test_broken_budget_file_keeps_the_telemetry(fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """A budget file with an error logs it (file, line, key) once and exports every span unannotated."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\ntotal_ms: fast\n", encoding="utf-8")
    run = run_with_console_exporters(
        AGENT_APP, fake_openai.base_url, broken, cwd=tmp_path, OTEL_PYTHON_CONFIGURATOR="latency_budget"
    )
    errors = [line for line in run.stderr.splitlines() if "latency budgets are off" in line]
    assert len(errors) == 1
    assert f"{broken}:2: total_ms" in errors[0]
    assert len(run.spans) == MODEL_SPANS + 2
    assert all(not budget_attributes(span) for span in run.spans)


def test_violation_logs_and_metrics_can_be_turned_off(
    fake_openai: FakeOpenAIServer, totals_only: Path, tmp_path: Path
) -> None:
    """OTEL_LATENCY_BUDGET_LOGS_ENABLED / _METRICS_ENABLED=false: no records, no metrics, spans still annotated."""
    run = run_with_console_exporters(
        AGENT_APP,
        fake_openai.base_url,
        totals_only,
        cwd=tmp_path,
        OTEL_PYTHON_CONFIGURATOR="latency_budget",
        OTEL_LOGS_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LATENCY_BUDGET_LOGS_ENABLED="false",
        OTEL_LATENCY_BUDGET_METRICS_ENABLED="false",
    )
    assert not run.violation_records()
    assert not run.metric_names("latency_budget")
    assert run.metric_names("opentelemetry.util.genai.handler")  # the metrics pipeline itself ran
    assert_annotated_once(run)


@pytest.mark.parametrize(
    ("chosen", "annotated_after_configurator"),
    [
        pytest.param("", False, id="not-chosen-defers-to-distro"),
        pytest.param("latency_budget", True, id="chosen-by-name"),
    ],
)
def test_configurator_defers_to_an_installed_distro_unless_chosen(
    totals_only: Path, tmp_path: Path, chosen: str, annotated_after_configurator: bool
) -> None:
    """Loaded without being chosen, our configurator runs opentelemetry-distro's instead; the hook adds budgets."""
    run = run_with_console_exporters(
        APPS / "configure_directly.py",
        "http://127.0.0.1:9/v1",
        totals_only,
        cwd=tmp_path,
        instrument=False,
        OTEL_PYTHON_CONFIGURATOR=chosen,
    )
    first = run.root("after configurator")
    second = run.root("after post-instrument hook")
    assert bool(budget_attributes(first)) is annotated_after_configurator
    assert budget_attributes(second)["latency_budget.violated"] is True
