"""Fixtures of the Helm chart's tests: the built tools, a real API server, the chart rendered by real helm.

etcd, kube-apiserver, helm and the Collector come from ``scripts/build-tools``. Without
them these tests are skipped, except under ``CI=true``, where a missing binary fails them.

Fixtures:
    k8s_tools     K8sTools: paths of the built etcd, kube-apiserver, helm and Collector
    api_server    ApiServer: etcd and kube-apiserver on loopback, one per module, with the
                  chart's namespace created (Pod Security ``restricted``, warn and enforce)
    render        Callable[[Path | None], list[dict]]: ``helm template`` of the chart with a
                  values file (None: the defaults), its objects parsed
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..ci import skip_or_fail_in_ci
from ..e2e.services import tools_bin_dir
from .cluster import ApiServer, running_api_server

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "latency-budget"
ALL_ON_VALUES = CHART / "ci" / "all-on-values.yaml"
NAMESPACE = "latency-budget"
RELEASE = "tier"


@dataclass(frozen=True)
class K8sTools:
    """The binaries these tests run."""

    etcd: Path
    kube_apiserver: Path
    helm: Path
    otelcol: Path


@pytest.fixture(scope="session")
def k8s_tools() -> K8sTools:
    """The built binaries; skipped (failed under CI) when one is missing."""
    bin_dir = tools_bin_dir()
    tools = K8sTools(
        etcd=bin_dir / "etcd",
        kube_apiserver=bin_dir / "kube-apiserver",
        helm=bin_dir / "helm",
        otelcol=bin_dir / "otelcol-latency-budget",
    )
    missing = [str(path) for path in vars(tools).values() if not os.access(path, os.X_OK)]
    if missing:
        skip_or_fail_in_ci(f"missing {', '.join(missing)} (run scripts/build-tools)")
    return tools


@pytest.fixture(scope="module")
def api_server(k8s_tools: K8sTools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real API server with the chart's namespace, shared by the tests of a module."""
    work = tmp_path_factory.mktemp("apiserver")
    with running_api_server(k8s_tools.etcd, k8s_tools.kube_apiserver, work) as api:
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
        yield api


@pytest.fixture(scope="session")
def render(k8s_tools: K8sTools, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path | None], list[dict[str, Any]]]:
    """``helm template`` of the chart (release ``tier`` in the chart's namespace), parsed."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def rendered(values: Path | None) -> list[dict[str, Any]]:
        argv = [str(k8s_tools.helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        if values is not None:
            argv += ["--values", str(values)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return rendered
