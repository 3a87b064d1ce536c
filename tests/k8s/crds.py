"""The CRDs of the chart's optional objects, from their projects' Go modules, installed on the test API server.

ServiceMonitor and PrometheusRule are the Prometheus Operator's, ScaledObject is KEDA's.
Each project publishes its CRD manifests in its Go module (the files its own installs
apply), so ``go mod download`` fetches them from the Go module proxy into the module
cache, by version, checked against the checksum database: nothing of them is copied into
this repository. A module already in the cache is read without the network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..ci import skip_or_fail_in_ci
from ..e2e.services import poll
from .cluster import ApiServer

# (module, version, the CRD manifests in it): the newest releases the module proxy serves whose
# go.mod the Go of scripts/build-tools (1.26) accepts (KEDA v2.21.1 asks for 1.27.4).
CRD_MODULES = (
    (
        "github.com/prometheus-operator/prometheus-operator",
        "v0.85.0",
        (
            "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
        ),
    ),
    ("github.com/kedacore/keda/v2", "v2.21.0", ("config/crd/bases/keda.sh_scaledobjects.yaml",)),
)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ESTABLISHED_TIMEOUT_S = 60.0


def _module_dir(module: str, version: str) -> Path:
    """The module's directory in the Go module cache, downloaded first when it is not there."""
    go = shutil.which("go")
    if go is None:
        skip_or_fail_in_ci(
            "go not found on PATH (the CRDs come from the Go module proxy; scripts/build-tools needs it)"
        )
    argv = [go, "mod", "download", "-json", f"{module}@{version}"]
    cached = subprocess.run(
        argv, env={**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod"}, capture_output=True, text=True, check=False
    )
    done = cached if cached.returncode == 0 else subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        skip_or_fail_in_ci(f"go mod download {module}@{version} failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return Path(json.loads(done.stdout)["Dir"])


def crd_manifests() -> list[dict[str, Any]]:
    """Every CRD the chart's optional objects need, parsed from the modules' manifests."""
    crds = []
    for module, version, paths in CRD_MODULES:
        where = _module_dir(module, version)
        for path in paths:
            crds += [doc for doc in yaml.safe_load_all((where / path).read_text(encoding="utf-8")) if doc]
    return crds


def install_crds(api: ApiServer) -> list[str]:
    """Create the CRDs on ``api`` and wait until each is established and its kind is served; their names."""
    names = []
    for crd in crd_manifests():
        created = api.request("POST", CRD_PATH, crd)
        assert created.status == 201, created.body
        name = crd["metadata"]["name"]
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        served = next(v["name"] for v in crd["spec"]["versions"] if v.get("served"))

        def ready(name: str = name, api_version: str = f"{group}/{served}", kind: str = kind) -> bool | None:
            status = api.request("GET", f"{CRD_PATH}/{name}").body.get("status", {})
            if not any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or []):
                return None
            try:
                api.resource(api_version, kind)
            except LookupError:  # discovery catches up a moment after the CRD is established
                return None
            return True

        poll(ready, timeout=ESTABLISHED_TIMEOUT_S, what=f"the CRD {name} established and served")
        names.append(name)
    return names
