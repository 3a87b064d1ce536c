"""Fixtures of the Helm chart's tests: the built tools, a real API server, the chart rendered by real helm.

etcd, kube-apiserver, helm and the Collector come from ``scripts/build-tools``. Without
them these tests are skipped, except under ``CI=true``, where a missing binary fails them.

Fixtures:
    otelcol       Path: the built Collector
    api_server    ApiServer: etcd and kube-apiserver on loopback, one per module, with the
                  chart's namespace created (Pod Security ``restricted``, warn and enforce)
                  and the CRDs of the chart's optional objects installed (crds.py)
    render        Callable[[Path | None], list[dict]]: ``helm template`` of the chart with a
                  values file (None: the defaults), its objects parsed
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..ci import skip_or_fail_in_ci
from ..e2e.services import tools_bin_dir
from .cluster import ApiServer, running_api_server
from .crds import install_crds

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "latency-budget"
ALL_ON_VALUES = CHART / "ci" / "all-on-values.yaml"
KEDA_VALUES = CHART / "ci" / "keda-values.yaml"
NAMESPACE = "latency-budget"
RELEASE = "tier"


def built_tool(name: str) -> Path:
    """The path of a binary of ``scripts/build-tools``; skipped (failed under CI) when missing."""
    path = tools_bin_dir() / name
    if not os.access(path, os.X_OK):
        skip_or_fail_in_ci(f"{path} is missing (run scripts/build-tools)")
    return path


@pytest.fixture(scope="session")
def otelcol() -> Path:
    """The built Collector."""
    return built_tool("otelcol-latency-budget")


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real API server with the chart's namespace, shared by the tests of a module."""
    etcd, kube_apiserver = built_tool("etcd"), built_tool("kube-apiserver")
    work = tmp_path_factory.mktemp("apiserver")
    with running_api_server(etcd, kube_apiserver, work) as api:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NAMESPACE,
                # The API server's Pod Security admission: workloads get a warning for each
                # pod template that breaks the restricted standard.
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/warn": "restricted",
                },
            },
        }
        created = api.request("POST", "/api/v1/namespaces", namespace)
        assert created.status == 201, created.body
        install_crds(api)  # ServiceMonitor, PrometheusRule, ScaledObject
        yield api


@pytest.fixture(scope="session")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path | None], list[dict[str, Any]]]:
    """``helm template`` of the chart (release ``tier`` in the chart's namespace), parsed."""
    helm = built_tool("helm")
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def rendered(values: Path | None) -> list[dict[str, Any]]:
        argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        if values is not None:
            argv += ["--values", str(values)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return rendered
