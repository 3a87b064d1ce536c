"""Run an app under the real ``opentelemetry-instrument`` and read what its console exporters wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

APPS = Path(__file__).resolve().parent / "apps"
AGENT_APP = APPS / "agent.py"

# A violated total, and nothing else: the built-in GenAI stages are tracked, not judged.
TOTALS_ONLY_YAML = "version: 1\ntotal_ms: 0.001\n"

VIOLATION = "latency_budget.violation"


def opentelemetry_instrument() -> Path:
    """The ``opentelemetry-instrument`` script installed next to this interpreter."""
    script = Path(sys.executable).with_name("opentelemetry-instrument")
    if not script.exists():
        raise FileNotFoundError(f"{script} is missing: pip install -e '.[test]' installs opentelemetry-instrumentation")
    return script


@dataclass
class Exported:
    """What one instrumented run printed: spans, log records and metrics, as JSON objects."""

    returncode: int
    stdout: str
    stderr: str
    spans: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    metrics: list[dict[str, Any]]

    def spans_named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]

    def root(self, name: str = "POST /ask") -> dict[str, Any]:
        """The only exported span called ``name``, which must have no parent."""
        roots = self.spans_named(name)
        assert len(roots) == 1, f"expected one exported {name!r} span, got {len(roots)}\n{self.stderr}"
        assert roots[0]["parent_id"] is None
        return roots[0]

    def metric_names(self, scope: str) -> set[str]:
        """Names of the metrics exported under instrumentation scope ``scope``."""
        return {metric["name"] for metric in self._metrics(scope)}

    def metric_points(self, scope: str, name: str) -> list[dict[str, Any]]:
        """The data points of metric ``name`` of scope ``scope``, from the last export that has it."""
        found = [metric for metric in self._metrics(scope) if metric["name"] == name]
        return list(found[-1]["data"]["data_points"]) if found else []

    def violation_records(self) -> list[dict[str, Any]]:
        """The exported log records of budget violations."""
        return [log for log in self.logs if (log.get("attributes") or {}).get("event.name") == VIOLATION]

    def _metrics(self, scope: str) -> list[dict[str, Any]]:
        return [
            metric
            for batch in self.metrics
            for resource in batch["resource_metrics"]
            for scoped in resource["scope_metrics"]
            if scoped["scope"]["name"] == scope
            for metric in scoped["metrics"]
        ]


def budget_attributes(span: Mapping[str, Any]) -> dict[str, Any]:
    """The ``latency_budget.*`` attributes of an exported span."""
    return {k: v for k, v in (span.get("attributes") or {}).items() if k.startswith("latency_budget.")}


def parse_console_output(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Split the SDK console exporters' output (pretty-printed JSON objects) into spans, logs, metrics."""
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    index = 0
    while index < len(text):
        if text[index] != "{":
            newline = text.find("\n", index)
            index = len(text) if newline < 0 else newline + 1
            continue
        item, index = decoder.raw_decode(text, index)
        if "resource_metrics" in item:
            metrics.append(item)
        elif "severity_number" in item:
            logs.append(item)
        else:
            spans.append(item)
    return spans, logs, metrics


def clean_environment(**overrides: str) -> dict[str, str]:
    """This process's environment without OTEL_* and OPENAI_* variables, plus ``overrides``.

    Loopback is kept off any HTTP proxy the machine may have configured.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(overrides)
    return env


def run_instrumented(
    app: Path, env: Mapping[str, str], *, cwd: Path, instrument: bool = True, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``opentelemetry-instrument python APP`` (or only ``python APP``) with ``env``, output captured."""
    launcher = [str(opentelemetry_instrument())] if instrument else []
    return subprocess.run(
        [*launcher, sys.executable, str(app)],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_with_console_exporters(
    app: Path, base_url: str, budget_file: Path | None, *, cwd: Path, instrument: bool = True, **otel_env: str
) -> Exported:
    """Run ``app`` instrumented, with console exporters for traces (and, if asked, logs and metrics).

    ``instrument=False`` runs it with plain ``python``: the app sets OpenTelemetry up itself.
    ``otel_env`` adds or overrides variables, e.g. ``OTEL_PYTHON_CONFIGURATOR="latency_budget"``.
    A value of ``""`` removes the variable.
    """
    env = clean_environment(
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="dummy-key",
        OTEL_SERVICE_NAME="agent-app",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    if budget_file is not None:
        env["OTEL_LATENCY_BUDGET_FILE"] = str(budget_file)
    for key, value in otel_env.items():
        if value:
            env[key] = value
        else:
            env.pop(key, None)
    done = run_instrumented(app, env, cwd=cwd, instrument=instrument)
    assert done.returncode == 0, f"instrumented app failed ({done.returncode})\n{done.stderr}"
    spans, logs, metrics = parse_console_output(done.stdout)
    return Exported(done.returncode, done.stdout, done.stderr, spans, logs, metrics)
