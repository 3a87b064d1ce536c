"""The Helm chart (deploy/helm/latency-budget), rendered by real helm and checked by a real API server.

Every object of the default render and of ``ci/all-on-values.yaml`` is created on the API
server with ``dryRun=All`` and ``fieldValidation=Strict``: its schema, admission and Pod
Security ``restricted`` (warnings on pod templates) all apply; nothing is stored. The
Collector's config in the chart is validated by the built Collector, serve's arguments by
serve's own parser, the budget file by ``latency-budget validate``.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from latency_budget import __version__
from latency_budget.cli._main import build_parser, main

from ..e2e.services import LOOPBACK, ManagedProcess, free_ports, poll
from ..serve.harness import NextHop
from .cluster import ApiServer
from .conftest import ALL_ON_VALUES, CHART, KEDA_VALUES, NAMESPACE, REPO

Render = Callable[[Path | None], list[dict[str, Any]]]
VALUES = {"defaults": None, "all-on": ALL_ON_VALUES, "keda": KEDA_VALUES}


def _one(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    """The one object of ``kind`` whose name ends with ``suffix``."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def _serve_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """serve's container in the StatefulSet."""
    container: dict[str, Any] = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_chart_is_versioned_with_the_package() -> None:
    """Chart.yaml's version and appVersion are the package's version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))

    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_default_budget_file_is_the_repository_example() -> None:
    """The chart's default budget file is budgets.example.yaml, byte for byte."""
    bundled = (CHART / "files" / "budgets.yaml").read_bytes()

    assert bundled == (REPO / "budgets.example.yaml").read_bytes()


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_every_object_is_accepted_by_the_api_server(api_server: ApiServer, render: Render, values: Path | None) -> None:
    """Each rendered object passes a dry-run create with strict field validation, without a Pod Security warning."""
    objects = render(values)
    refused = {}
    warned = {}
    for obj in objects:
        answer = api_server.dry_run_create(obj, NAMESPACE)
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if answer.status != 201:
            refused[name] = answer.body.get("message", answer.body)
        if answer.warnings:
            warned[name] = answer.warnings

    assert refused == {}
    assert warned == {}
    kinds = {obj["kind"] for obj in objects}
    expected = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "StatefulSet"}
    assert expected | {"PodDisruptionBudget"} <= kinds
    assert ("HorizontalPodAutoscaler" in kinds) == (values == ALL_ON_VALUES)
    assert ("ScaledObject" in kinds) == (values == KEDA_VALUES)
    assert ({"ServiceMonitor", "PrometheusRule"} <= kinds) == (values is not None)


def test_the_api_server_refuses_an_unknown_field_and_warns_on_an_unsafe_pod(
    api_server: ApiServer, render: Render
) -> None:
    """The checks can fail: a misspelt field is refused, a pod that may escalate draws a Pod Security warning."""
    statefulset = _one(render(None), "StatefulSet")
    misspelt = copy.deepcopy(statefulset)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"periodSeconds": 5}
    unsafe = copy.deepcopy(statefulset)
    unsafe["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True

    refused = api_server.dry_run_create(misspelt, NAMESPACE)
    warned = api_server.dry_run_create(unsafe, NAMESPACE)

    assert refused.status == 400
    assert 'unknown field "spec.template.spec.containers[0].readinesProbe"' in refused.body["message"]
    assert warned.status == 201
    assert any("allowPrivilegeEscalation" in warning for warning in warned.warnings)


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_the_collector_config_is_valid_for_the_built_collector(
    otelcol: Path, render: Render, values: Path | None, tmp_path: Path
) -> None:
    """The chart's Collector config passes `otelcol validate`, its k8s resolver on serve's headless Service."""
    objects = render(values)
    config_text = _one(objects, "ConfigMap", "-collector")["data"]["config.yaml"]
    config = yaml.safe_load(config_text)
    resolver = config["exporters"]["load_balancing"]["resolver"]["k8s"]
    headless = _one(objects, "Service", "-serve")
    (tmp_path / "config.yaml").write_text(config_text, encoding="utf-8")

    done = subprocess.run(
        [str(otelcol), "validate", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert resolver["service"] == f"{headless['metadata']['name']}.{NAMESPACE}"
    assert resolver["return_hostnames"] is True
    assert headless["spec"]["clusterIP"] == "None"
    assert _one(objects, "StatefulSet")["spec"]["serviceName"] == headless["metadata"]["name"]


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_serve_takes_the_arguments_and_budget_file_of_the_chart(
    render: Render, values: Path | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve's parser takes the StatefulSet's arguments, and the ConfigMap's budget file validates."""
    objects = render(values)
    args = _serve_container(objects)["args"]
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(_one(objects, "ConfigMap", "-budgets")["data"]["budgets.yaml"], encoding="utf-8")

    with pytest.raises(SystemExit) as unknown:
        build_parser().parse_args([*args[1:], "--no-such-option", "1"])
    parsed = build_parser().parse_args(args[1:])
    status = main(["validate", str(budgets)])

    assert unknown.value.code == 2  # the parser refuses what serve does not know
    assert "--no-such-option" in capsys.readouterr().err
    assert args[0] == "latency-budget"
    assert parsed.command == "serve"
    assert parsed.wal_dir == "/wal"
    assert status == 0


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_serve_outlives_its_drain_and_is_ready_only_once_replayed(render: Render, values: Path | None) -> None:
    """The grace period is longer than preStop plus the drain deadline; every probe asks serve's health endpoint."""
    objects = render(values)
    statefulset = _one(objects, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    container = _serve_container(objects)
    args = container["args"]
    drain = float(args[args.index("--shutdown-timeout") + 1])
    pre_stop = float(container["lifecycle"]["preStop"]["exec"]["command"][1])
    liveness = container["livenessProbe"]

    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > pre_stop + drain
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "health"}
    assert {"name": "health", "containerPort": 13133, "protocol": "TCP"} in container["ports"]
    assert args[args.index("--health-endpoint") + 1] == "0.0.0.0:13133"
    assert [t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]] == ["wal"]
    assert {"name": "wal", "mountPath": "/wal"} in container["volumeMounts"]


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_every_container_runs_unprivileged_on_a_read_only_root(render: Render, values: Path | None) -> None:
    """Each container: non-root, no privilege escalation, no capabilities, a read-only root file system."""
    containers = [
        container
        for obj in render(values)
        if obj["kind"] in {"Deployment", "StatefulSet"}
        for container in obj["spec"]["template"]["spec"]["containers"]
    ]

    assert containers
    for container in containers:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]


def _container_env(container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet makes it: ``$(NAME)`` of earlier variables expanded."""
    env: dict[str, str] = {}
    for item in container["env"]:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
            env[item["name"]] = pod_name
        else:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"])
    return env


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_serve_starts_with_the_chart_arguments_and_environment(
    render: Render, values: Path | None, tmp_path: Path
) -> None:
    """Real serve, given the StatefulSet's arguments and environment (addresses and paths local), serves and drains."""
    objects = render(values)
    container = _serve_container(objects)
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(_one(objects, "ConfigMap", "-budgets")["data"]["budgets.yaml"], encoding="utf-8")
    grpc_port, http_port, health_port = free_ports(3)
    local = {
        "--budgets": str(budgets),
        "--grpc-endpoint": f"{LOOPBACK}:{grpc_port}",
        "--http-endpoint": f"{LOOPBACK}:{http_port}",
        "--health-endpoint": f"{LOOPBACK}:{health_port}",
        "--wal-dir": str(tmp_path / "wal"),
    }
    args = list(container["args"][1:])
    for index, arg in enumerate(args[:-1]):
        if arg in local:
            args[index + 1] = local[arg]
    hop = NextHop()
    env = _container_env(container, "tier-serve-0")
    endpoints = [name for name in env if name.startswith("OTEL_EXPORTER_OTLP_") and name.endswith("ENDPOINT")]
    env.update({name: hop.url for name in endpoints})
    serve = ManagedProcess(
        name="serve",
        argv=[sys.executable, "-m", "latency_budget", *args],
        env=env,
        log_path=tmp_path / "serve.log",
        health_url=f"http://{LOOPBACK}:{health_port}/health",
    )
    try:
        serve.start()
        # The health endpoint opens just before the listening line is written.
        listening = poll(
            lambda: next(
                (json.loads(line) for line in serve.log_text().splitlines() if line.startswith('{"event":"listening"')),
                None,
            ),
            timeout=10,
            what="serve's listening line",
        )
        code = serve.stop()
    finally:
        serve.stop()
        hop.stop()

    assert code == 0, serve.log_tail()
    assert listening["grpc"] == f"{LOOPBACK}:{grpc_port}"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in endpoints
    assert (tmp_path / "wal").is_dir()


@pytest.mark.parametrize("interval", ["10", "off"])
def test_the_budget_file_reaches_serve_live_unless_reload_is_off(render: Render, interval: str, tmp_path: Path) -> None:
    """The ConfigMap is mounted as a directory (no subPath); a checksum rolls the pods only with reload off."""
    values = tmp_path / "values.yaml"
    values.write_text(f"serve:\n  reloadInterval: {interval}\n", encoding="utf-8")
    objects = render(values)
    template = _one(objects, "StatefulSet")["spec"]["template"]
    container = _serve_container(objects)
    args = container["args"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "budgets"]
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "budgets"]

    assert "subPath" not in mount  # a subPath file is never updated in the container
    assert args[args.index("--budgets") + 1] == mount["mountPath"] + "/budgets.yaml"
    assert volume["configMap"]["name"] == _one(objects, "ConfigMap", "-budgets")["metadata"]["name"]
    assert args[args.index("--reload-interval") + 1] == interval
    rolls = "checksum/budgets" in template["metadata"].get("annotations", {})
    assert rolls == (interval == "off")


def test_serve_hands_rootless_parts_back_through_the_charts_collector(render: Render, tmp_path: Path) -> None:
    """serve.handover.enabled: --handover-endpoint is the chart's Collector Service (OTLP/gRPC); on by default."""
    off = tmp_path / "off.yaml"
    off.write_text("serve:\n  handover:\n    enabled: false\n", encoding="utf-8")
    found = {}
    for name, values in {"defaults": None, "off": off, "all-on": ALL_ON_VALUES}.items():
        objects = render(values)
        service = _one(objects, "Service", "-collector")
        port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-grpc")
        args = _serve_container(objects)["args"]
        given = args[args.index("--handover-endpoint") + 1] if "--handover-endpoint" in args else None
        found[name] = (given, f"http://{service['metadata']['name']}.{NAMESPACE}.svc:{port}")

    assert found["defaults"][0] == found["defaults"][1]
    assert found["off"][0] is None
    assert found["all-on"][0] == found["all-on"][1]  # its serve.handover.endpoint names the same Service
