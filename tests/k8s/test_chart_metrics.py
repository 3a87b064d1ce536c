"""The chart's optional ServiceMonitor, PrometheusRule and KEDA ScaledObject, against their CRDs and the real promtool.

The API server has the CRDs of the Prometheus Operator and KEDA (crds.py), so the objects
are checked as a cluster with those operators checks them (schema, strict fields). Their
PromQL is checked by promtool: the alerts fire on serve's series as it names them, and
every series the chart names is one of serve's (stats.METRICS).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from latency_budget._serve.exposition import prometheus_name
from latency_budget._serve.stats import METRICS
from latency_budget.cli._main import main

from ..binaries import require_program
from .cluster import ApiServer
from .conftest import CHART, KEDA_VALUES, NAMESPACE, RELEASE, REPO, built_tool
from .test_chart import Render, _one

SERVICE = f"{RELEASE}-serve"  # serve's headless Service (fullnameOverride: tier)


def _with_budget_rules(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """keda-values.yaml plus what `latency-budget rules` writes for the example budgets, as --set-file gives it."""
    rules_file = tmp_path / "rules.yml"
    assert main(["rules", "-b", str(REPO / "budgets.example.yaml"), "-o", str(rules_file)]) == 0
    rules_text = rules_file.read_text(encoding="utf-8")
    values = yaml.safe_load(KEDA_VALUES.read_text(encoding="utf-8"))
    values["serve"]["metrics"]["prometheusRule"]["budgetRules"] = rules_text
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path, yaml.safe_load(rules_text)


def _promtool() -> str:
    return require_program("promtool", install="apt-get install prometheus")


def test_the_budget_rules_join_serves_alerts_and_the_api_server_takes_them(
    api_server: ApiServer, render: Render, tmp_path: Path
) -> None:
    """The generator's groups follow serve's own in the PrometheusRule, which the CRD and promtool both accept."""
    values, generated = _with_budget_rules(tmp_path)
    rule = _one(render(values), "PrometheusRule")
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")

    answer = api_server.dry_run_create(rule, NAMESPACE)
    checked = subprocess.run(
        [_promtool(), "check", "rules", str(tmp_path / "spec.yml")], capture_output=True, text=True, check=False
    )

    assert answer.status == 201, answer.body
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert rule["spec"]["groups"][0]["name"] == "latency-budget-serve"
    assert rule["spec"]["groups"][1:] == generated["groups"]


def test_serves_alerts_fire_on_its_series_and_stay_silent_below(render: Render, tmp_path: Path) -> None:
    """promtool test rules: each serve alert fires for the instance past its threshold and not for the other."""
    rule = _one(render(KEDA_VALUES), "PrometheusRule")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"][:1]}), encoding="utf-8")
    labels = f'namespace="{NAMESPACE}", service="{SERVICE}"'

    def series(name: str, pod: str, values: str) -> dict[str, str]:
        return {"series": f'{name}{{{labels}, pod="{pod}"}}', "values": values}

    def alert(pod: str) -> dict[str, Any]:
        return {"exp_labels": {"namespace": NAMESPACE, "pod": pod, "severity": "ticket"}}

    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series("latency_budget_serve_held_bytes", "serve-0", "90x30"),
                    series("latency_budget_serve_held_bytes", "serve-1", "70x30"),
                    series("latency_budget_serve_held_limit_bytes", "serve-0", "100x30"),
                    series("latency_budget_serve_held_limit_bytes", "serve-1", "100x30"),
                    series("latency_budget_serve_requests_refused_total", "serve-0", "0+5x30"),
                    series("latency_budget_serve_requests_refused_total", "serve-1", "3x30"),
                    series("latency_budget_serve_spans_dropped_total", "serve-0", "0x10 7x20"),
                    series("latency_budget_serve_spans_dropped_total", "serve-1", "2x30"),
                    *(
                        series(f"latency_budget_serve_{name}_total", pod, "0x30")
                        for name in ("spans_too_large", "wal_spans_lost", "wal_spans_corrupt")
                        for pod in ("serve-0", "serve-1")
                    ),
                ],
                "alert_rule_test": [
                    {"eval_time": "20m", "alertname": name, "exp_alerts": [alert("serve-0")]}
                    for name in ("LatencyBudgetServeNearlyFull", "LatencyBudgetServeRefusing")
                ]
                + [
                    {"eval_time": "12m", "alertname": "LatencyBudgetServeSpansLost", "exp_alerts": [alert("serve-0")]},
                    {"eval_time": "25m", "alertname": "LatencyBudgetServeSpansLost", "exp_alerts": []},
                    {"eval_time": "5m", "alertname": "LatencyBudgetServeNearlyFull", "exp_alerts": []},
                ],
            }
        ],
    }
    # The annotations are Prometheus' to render; the test holds the labels (which pod, which severity).
    for case in tests["tests"][0]["alert_rule_test"]:  # type: ignore[index]
        for expected in case["exp_alerts"]:
            expected["exp_annotations"] = _annotations(rule, case["alertname"], expected["exp_labels"]["pod"])
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests), encoding="utf-8")

    done = subprocess.run(
        [_promtool(), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr


def _annotations(rule: dict[str, Any], name: str, pod: str) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them for ``pod``, held at 90% (the only values templated)."""
    (found,) = (r for r in rule["spec"]["groups"][0]["rules"] if r.get("alert") == name)
    return {
        key: text.replace("{{ $labels.pod }}", pod).replace("{{ $value | humanizePercentage }}", "90%")
        for key, text in found["annotations"].items()
    }


def test_every_series_the_chart_names_is_one_of_serves() -> None:
    """Each latency_budget_serve_* name in the templates, values.yaml and ci files is a Prometheus name of METRICS."""
    known = {prometheus_name(row) for row in METRICS}
    files = [*sorted((CHART / "templates").iterdir()), CHART / "values.yaml", *sorted((CHART / "ci").iterdir())]
    named = {name for path in files for name in re.findall(r"latency_budget_serve_\w+", path.read_text("utf-8"))}

    assert len(named) >= 6, named  # the pattern sees the alerts' and KEDA's series
    assert named <= known, sorted(named - known)


def test_the_scaled_object_asks_prometheus_for_serves_load_and_strict_fields_hold(
    api_server: ApiServer, render: Render, tmp_path: Path
) -> None:
    """KEDA's query is valid PromQL on serve's gauge over its Service; a misspelt ScaledObject field is refused."""
    scaled = _one(render(KEDA_VALUES), "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    rules = {"groups": [{"name": "keda", "rules": [{"record": "keda:query", "expr": query}]}]}
    (tmp_path / "query.yml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["minReplicas"] = 3

    checked = subprocess.run(
        [_promtool(), "check", "rules", str(tmp_path / "query.yml")], capture_output=True, text=True, check=False
    )
    refused = api_server.dry_run_create(misspelt, NAMESPACE)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert query == f'sum(latency_budget_serve_queued_bytes{{namespace="{NAMESPACE}", service="{SERVICE}"}})'
    assert (trigger["type"], trigger["metricType"], trigger["metadata"]["threshold"]) == (
        "prometheus",
        "AverageValue",
        "33554432",
    )
    assert scaled["spec"]["scaleTargetRef"]["name"] == _one(render(KEDA_VALUES), "StatefulSet")["metadata"]["name"]
    assert "replicas" not in _one(render(KEDA_VALUES), "StatefulSet")["spec"]  # KEDA's HPA sets it
    assert refused.status == 400
    assert 'unknown field "spec.minReplicas"' in refused.body["message"]


def test_the_service_monitor_scrapes_serves_metrics_port(render: Render) -> None:
    """The ServiceMonitor selects serve's headless Service and scrapes /metrics on its health port."""
    objects = render(KEDA_VALUES)
    monitor = _one(objects, "ServiceMonitor")
    service = _one(objects, "Service", "-serve")
    (endpoint,) = monitor["spec"]["endpoints"]

    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert (endpoint["port"], endpoint["path"]) == ("health", "/metrics")
    assert "health" in {port["name"] for port in service["spec"]["ports"]}


def test_keda_and_the_hpa_together_are_refused(tmp_path: Path) -> None:
    """Both autoscalers on is one clear helm error, not two HPAs fighting over the StatefulSet."""
    helm = built_tool("helm")
    home = tmp_path / "helm-home"
    env = {f"HELM_{part}_HOME": str(home / part.lower()) for part in ("CACHE", "CONFIG", "DATA")}

    done = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "-f", str(KEDA_VALUES), "--set", "serve.autoscaling.enabled=true"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert "serve.keda.enabled and serve.autoscaling.enabled: choose one" in done.stderr
