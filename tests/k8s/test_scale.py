"""A real scale event, 2 -> 3 -> 2 instances, against a real API server, Collector and ``serve``.

tests/k8s/scale.py runs in a network namespace of its own (it runs itself under
``unshare --map-root-user --net --mount``): a real etcd and kube-apiserver, the chart's ServiceAccount, Role,
RoleBinding and headless Service created for real, the built Collector with the chart's
config and its ``k8s`` resolver (a token of that ServiceAccount), three ``serve`` processes
with the StatefulSet's arguments, and an EndpointSlice written as the controller writes it:
the third instance joins while traces flow, then leaves as the kubelet stops a pod (not
ready, the chart's ``preStop``, SIGTERM, drain). Each instance forwards to a next hop of
its own that records every span id. The test holds the run to the truth by span id and
prints the figures docs/kubernetes.md quotes. It runs twice: with the chart's defaults (the
handover on: a split trace's rootless part goes back through the Collector to its root's
instance, and every trace is judged whole) and with ``serve.handover.enabled=false``, the
null control, where a split trace is judged on part and its rootless part marked ``no_root``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from ..binaries import require_program
from ..ci import skip_or_fail_in_ci
from ..e2e.services import _with_parent_death_signal
from .conftest import REPO, built_tool
from .scale import ADDED, NAMESPACES, PARTIAL, judged_whole, summarise

RUN_TIMEOUT_S = 300.0  # about 40 s when idle


def _scale_run(tmp_path_factory: pytest.TempPathFactory, overrides: list[str]) -> dict[str, Any]:
    """One run of tests/k8s/scale.py in its own network namespace, with ``--set`` ``overrides``: the result (JSON)."""
    for tool in ("etcd", "kube-apiserver", "helm", "otelcol-latency-budget"):
        built_tool(tool)
    unshare = require_program("unshare", install="Debian's util-linux")
    require_program("ip", install="Debian's iproute2")
    probe = subprocess.run([unshare, *NAMESPACES, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        skip_or_fail_in_ci(f"cannot make a network namespace here (unshare: {probe.stderr.strip()})")
    out = tmp_path_factory.mktemp("scale") / "result.json"
    argv = [sys.executable, "-m", "tests.k8s.scale", "--out", str(out)]  # it runs itself under unshare
    for override in overrides:
        argv += ["--set", override]
    done = subprocess.run(
        _with_parent_death_signal(argv),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    print(overrides or "the chart's defaults", done.stdout)  # the figures (pytest -s shows them)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


@pytest.fixture(scope="module")
def scale_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scale event with the chart's defaults: the handover on, through the Collector Service's name."""
    return _scale_run(tmp_path_factory, [])


@pytest.fixture(scope="module")
def scale_run_without_handover(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The null control: the same scale event with serve.handover.enabled=false."""
    return _scale_run(tmp_path_factory, ["serve.handover.enabled=false"])


@pytest.fixture(params=["scale_run", "scale_run_without_handover"])
def either_run(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each of the two runs."""
    result: dict[str, Any] = request.getfixturevalue(request.param)
    return result


def test_every_span_is_forwarded_once_through_the_scale_event(either_run: dict[str, Any]) -> None:
    """Every span sent reaches a next hop exactly once; nothing else arrives; the sender was never refused."""
    summary = summarise(either_run)
    collector = either_run["collector"]
    through_collector = summary["spans_sent"] + summary["spans_handed_over"]  # a handover goes twice

    assert either_run["sender_failed"] == 0
    assert summary["spans_lost"] == 0
    assert summary["spans_doubled"] == 0
    assert summary["spans_unexpected"] == 0
    assert collector["otelcol_receiver_accepted_spans"] == through_collector
    assert collector["otelcol_exporter_sent_spans"] == through_collector
    assert not collector["otelcol_exporter_send_failed_spans"]


def test_nothing_acknowledged_is_lost_and_every_instance_drains_clean(either_run: dict[str, Any]) -> None:
    """Each instance exits 0 after its drain, with nothing dropped or left in its log; the added one took traffic."""
    counters = either_run["counters"]

    assert either_run["exit_codes"] == {"0": 0, "1": 0, "2": 0}
    for index, found in counters.items():
        assert found["spans_dropped"] == 0, index
        assert found["spans_kept_in_wal"] == 0, index
        assert found["spans_forwarded"] + found.get("spans_handed_over", 0) == found["spans_received"], index
    assert counters[str(ADDED)]["spans_received"] > 0


def test_the_handover_judges_every_trace_whole_through_the_scale_event(scale_run: dict[str, Any]) -> None:
    """With the chart's defaults rootless parts were handed over and no trace was judged on part of its spans."""
    summary = summarise(scale_run)
    roots = scale_run["roots"]

    assert summary["traces_handed_over"] > 0  # the scale event split traces, and they went back
    assert summary["spans_handed_over"] > 0
    assert summary["traces_split"] == 0  # every span went out through its root's instance
    assert summary["marked_traces"] == []
    assert summary["marks_by_reason"] == {}
    assert summary["traces_partial_counted"] == 0
    assert summary["traces_forwarded_unjudged"] == 0
    assert summary["traces_judged"] == scale_run["traces"]
    assert sorted(root["trace"] for root in roots) == list(range(1, scale_run["traces"] + 1))
    assert [root["trace"] for root in roots if not judged_whole(root["attributes"])] == []
    assert [root["trace"] for root in roots if PARTIAL in root["attributes"]] == []


def test_the_resolver_follows_the_endpoint_slice_both_ways(scale_run_without_handover: dict[str, Any]) -> None:
    """Both changes reached the Collector before the pod was stopped, and each split some open traces."""
    summary = summarise(scale_run_without_handover)
    events = scale_run_without_handover["events"]

    assert events["scale_down"]["applied"] <= events["scale_down"]["sigterm"]  # within the chart's preStop
    for name in ("scale_up", "scale_down"):
        assert 0 < summary["events"][name]["split"] < summary["events"][name]["open"], name
    assert summary["traces_split_otherwise"] == 0  # only the added instance's share moved


def test_without_the_handover_split_traces_are_judged_on_part_and_counted(
    scale_run_without_handover: dict[str, Any],
) -> None:
    """Each trace is judged once; a split one on part of its spans, its rootless part counted unjudged."""
    run = scale_run_without_handover
    summary = summarise(run)
    roots = run["roots"]
    split = set(summary["split_traces"])

    assert summary["traces_handed_over"] == 0
    assert sorted(root["trace"] for root in roots) == list(range(1, run["traces"] + 1))
    assert all("latency_budget.verdict" in root["attributes"] for root in roots)
    judged_on_part = {root["trace"] for root in roots if not judged_whole(root["attributes"])}
    assert judged_on_part == split
    assert summary["traces_judged"] == run["traces"]
    assert summary["traces_forwarded_unjudged"] == len(split)
    whole = [root for root in roots if root["trace"] not in split]
    assert all(root["attributes"].get(PARTIAL) is not True for root in whole)


def test_without_the_handover_every_split_trace_is_marked_partial_and_counted_once(
    scale_run_without_handover: dict[str, Any],
) -> None:
    """Each split trace's rootless part has its top spans marked no_root and is counted once; no whole trace is."""
    run = scale_run_without_handover
    summary = summarise(run)
    split = summary["split_traces"]

    assert summary["split_marked"] == len(split)
    assert summary["whole_marked"] == 0
    assert summary["marks_by_reason"] == {"no_root": (run["spans_per_trace"] - 1) * len(split)}
    assert summary["traces_partial_counted"] == len(split)
