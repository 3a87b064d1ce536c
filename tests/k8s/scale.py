"""A scale event of the collector tier, 2 -> 3 -> 2 instances, run in a network namespace of its own.

Run by tests/k8s/test_scale.py, or by hand (as root, or where unprivileged user namespaces
are allowed) to repeat the figures of docs/kubernetes.md, "What a scale event costs"::

    python3 -m tests.k8s.scale [--seed N] [--set KEY=VALUE]

It runs itself again under ``unshare --map-root-user --net --mount``: a network namespace
and a mount namespace of its own. The API server refuses loopback addresses in
EndpointSlices, so the instances listen on addresses of 10.250.0.0/24, given to that
namespace's own ``lo``, and its ``/etc/hosts`` (the pods' names, for the resolver's
``return_hostnames``, and the Collector Service's, for serve's ``--handover-endpoint``)
is bind-mounted in that mount namespace only. Inside, it checks
again that ``lo`` is the only link, so nothing of the host's network is touched.

Everything is real and from the chart, rendered by real helm: a real etcd and
kube-apiserver; the chart's Namespace objects (the Collector's ServiceAccount, Role and
RoleBinding, serve's headless Service) created for real; the built Collector with the
chart's Collector config, its ``k8s`` resolver authenticated by a token of that
ServiceAccount (so the chart's Role is what lets it watch); ``latency-budget serve``
instances with the StatefulSet's arguments and environment (addresses and paths made
local), each forwarding to a next hop of its own that records every span id, so the
instance each span went through is known. No controller or kubelet runs: this module
writes the EndpointSlice as the EndpointSlice controller would, and stops an instance as
the kubelet would (the endpoint marked not ready and terminating, the chart's ``preStop``
run, then SIGTERM, then the endpoint gone).

Traffic: ``--traces`` traces sent by the SDK's OTLP/gRPC exporter, each trace's children
first and its root ``ROOT_LAG`` traces later, so about ``ROOT_LAG`` traces are open at any
moment. Scale up once the traffic is steady, down once every trace open at the scale-up
is complete. The result (JSON) is the
truth by span id and each instance's final counters; ``summarise`` turns it into the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from latency_budget._serve.otlp import attributes_of

from ..e2e.services import ManagedProcess, http_get, poll, tools_bin_dir
from ..serve.harness import NextHop, record
from ..serve.test_command import BUDGET_FILE
from ..serve.test_judging import agent_trace
from .cluster import ApiServer, running_api_server

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "latency-budget"
NAMESPACE = "latency-budget"
RELEASE = "tier"
FULLNAME = f"{RELEASE}-latency-budget"
SERVICE = f"{FULLNAME}-serve"  # serve's headless Service, the resolver's service
# The Collector Service's name as the chart renders serve's --handover-endpoint (lb.handover):
# the namespace's /etc/hosts gives it the Collector's address, so the chart's default works.
COLLECTOR_SERVICE = f"{FULLNAME}-collector.{NAMESPACE}.svc"
SLICE = f"{SERVICE}-scale"  # the EndpointSlice this module keeps, as the controller would
NETWORK = "10.250.0"
COLLECTOR_IP = f"{NETWORK}.10"
SERVE_IPS = [f"{NETWORK}.{host}" for host in (2, 3, 4)]
ADDED = 2  # the instance the scale-up adds and the scale-down removes
SPANS_PER_TRACE = 4  # agent_trace: the root, a retrieval of 60 ms and two model calls of 120 ms
RETRIEVAL_MS, MODEL_MS = 60.0, 240.0  # the stage times of the whole trace
TRACES = 400  # about 16 s of traffic at PACE_S
ROOT_LAG = 40  # a trace's root is sent this many traces after its children
PACE_S = 0.04  # the sender's pace: the traffic, not a synchronisation
TIMEOUT_S = 120.0
# serve's options that the chart sets and this module changes: short waits, so a split
# trace's rootless part is forwarded within seconds (--max-wait) and a run is short.
VALUES = {
    "serve": {
        "budgets": BUDGET_FILE,
        "decisionWait": 2,
        "maxWait": 6,
        "shutdownTimeout": 10,
        "nextHop": {"endpoint": "http://next-hop:4317"},  # each instance's own recording hop, in its place
    },
    "jaeger": {"enabled": False},
}
PARTIAL = "latency_budget.partial"
NAMESPACES = ["--map-root-user", "--net", "--mount"]  # unshare's: a user, network and mount namespace
INSIDE = "LATENCY_BUDGET_SCALE_NAMESPACED"  # set when this module runs itself inside them


def _pod(index: int) -> str:
    return f"{SERVICE}-{index}"


def _hostname(index: int) -> str:
    """What the resolver routes to with ``return_hostnames``: ``<pod>.<service>.<namespace>``."""
    return f"{_pod(index)}.{SERVICE}.{NAMESPACE}"


def own_network_namespace(work: Path) -> None:
    """Give this (fresh) network namespace its addresses and this mount namespace its /etc/hosts (kept in ``work``)."""
    links = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip() for line in links.splitlines() if line.strip()]
    if names != ["lo"]:
        raise SystemExit(f"not in a network namespace of its own (links: {names})")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in [*SERVE_IPS, COLLECTOR_IP]:
        subprocess.run(["ip", "addr", "add", f"{address}/24", "dev", "lo"], check=True)
    hosts = work / "hosts"
    lines = [
        "127.0.0.1 localhost",
        *(f"{ip} {_hostname(i)}" for i, ip in enumerate(SERVE_IPS)),
        f"{COLLECTOR_IP} {COLLECTOR_SERVICE}",
    ]
    hosts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy"):
        os.environ.pop(name, None)


def render(helm: Path, work: Path, overrides: list[str]) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``VALUES`` and ``overrides`` (``--set`` of helm), parsed."""
    values = work / "values.yaml"
    values.write_text(json.dumps(VALUES), encoding="utf-8")  # JSON is YAML
    home = work / "helm-home"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(values)]
    for override in overrides:
        argv += ["--set", override]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm template: {done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"{kind}/{name}: {len(found)} in the render")
    return found[0]


def _create(api: ApiServer, obj: dict[str, Any]) -> dict[str, Any]:
    """Create ``obj`` in the namespace for real; its stored form."""
    resource = api.resource(obj["apiVersion"], obj["kind"])
    prefix = "/api/" if "/" not in resource.group_version else "/apis/"
    scope = f"/namespaces/{NAMESPACE}" if resource.namespaced else ""
    answer = api.request("POST", f"{prefix}{resource.group_version}{scope}/{resource.name}?fieldValidation=Strict", obj)
    if answer.status != 201:
        raise RuntimeError(f"creating {obj['kind']}/{obj['metadata']['name']}: {answer.status} {answer.body}")
    return answer.body


def collector_kubeconfig(api: ApiServer, service_account: str, work: Path) -> Path:
    """A kubeconfig for the Collector: the API server's CA and a token of the chart's ServiceAccount."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{service_account}/token", request)
    if answer.status != 201:
        raise RuntimeError(f"TokenRequest for {service_account}: {answer.status} {answer.body}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": str(api.ca_file)}}],
        "users": [{"name": service_account, "user": {"token": answer.body["status"]["token"]}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": service_account, "namespace": NAMESPACE}}],
        "current-context": "test",
    }
    path = work / "collector.kubeconfig"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@dataclass
class EndpointSlice:
    """serve's EndpointSlice, written as the EndpointSlice controller writes it for a headless Service."""

    api: ApiServer
    # pod index -> (ready, terminating)
    endpoints: dict[int, tuple[bool, bool]] = field(default_factory=dict)
    _created: bool = False

    @property
    def path(self) -> str:
        return f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"

    def _object(self) -> dict[str, Any]:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": SLICE,
                "labels": {
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "tests.k8s.scale",
                },
            },
            "addressType": "IPv4",
            "ports": [
                {"name": "otlp-grpc", "port": 4317, "protocol": "TCP"},
                {"name": "otlp-http", "port": 4318, "protocol": "TCP"},
                {"name": "health", "port": 13133, "protocol": "TCP"},
            ],
            "endpoints": [
                {
                    "addresses": [SERVE_IPS[index]],
                    "hostname": _pod(index),
                    # A terminating pod still passing its readiness probe (preStop runs before
                    # SIGTERM) is serving but not ready: the resolver takes ready only.
                    "conditions": {"ready": ready, "serving": ready or terminating, "terminating": terminating},
                }
                for index, (ready, terminating) in sorted(self.endpoints.items())
            ],
        }

    def write(self) -> None:
        """Create or replace the slice with the current endpoints."""
        body = self._object()
        if not self._created:
            answer = self.api.request("POST", self.path, body)
            self._created = answer.status == 201
        else:
            current = self.api.request("GET", f"{self.path}/{SLICE}")
            body["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"]
            answer = self.api.request("PUT", f"{self.path}/{SLICE}", body)
        if answer.status not in (200, 201):
            raise RuntimeError(f"writing the EndpointSlice: {answer.status} {answer.body}")


@dataclass
class Instance:
    """One serve 'pod': its process and the next hop that records what it forwarded."""

    index: int
    process: ManagedProcess
    hop: NextHop
    health_url: str

    def final_counters(self) -> dict[str, int]:
        """The counters of its ``shutdown`` line (it has exited)."""
        for line in reversed(self.process.log_text().splitlines()):
            if line.startswith('{"event":"shutdown"'):
                return {str(k): int(v) for k, v in json.loads(line)["counters"].items()}
        raise LookupError(f"{self.process.name} wrote no shutdown line\n{self.process.log_tail()}")


def _serve_process(statefulset: dict[str, Any], index: int, budgets: Path, hop: NextHop, work: Path) -> Instance:
    """serve with the StatefulSet's arguments and environment, its addresses the pod's, its paths local."""
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    ip = SERVE_IPS[index]
    local = {
        "--budgets": str(budgets),
        "--grpc-endpoint": f"{ip}:4317",
        "--http-endpoint": f"{ip}:4318",
        "--health-endpoint": f"{ip}:13133",
        "--wal-dir": str(work / f"wal-{index}"),
    }
    args = list(container["args"][1:])
    for position, arg in enumerate(args[:-1]):
        if arg in local:
            args[position + 1] = local.pop(arg)
    if local:
        raise LookupError(f"the StatefulSet's arguments have no {sorted(local)}")
    env: dict[str, str] = {}
    for item in container["env"]:
        if "valueFrom" in item:  # POD_NAME, from the downward API
            env[item["name"]] = _pod(index)
        else:
            env[item["name"]] = item["value"].replace("$(POD_NAME)", env.get("POD_NAME", ""))
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = hop.url
    health_url = f"http://{ip}:13133/health"
    process = ManagedProcess(
        name=_pod(index),
        argv=[sys.executable, "-m", "latency_budget", *args],
        env=env,
        log_path=work / f"{_pod(index)}.log",
        health_url=health_url,
    )
    return Instance(index, process, hop, health_url)


def _collector_config(objects: list[dict[str, Any]], work: Path) -> Path:
    """The chart's Collector config, its listeners on the Collector 'pod's address."""
    text = _one(objects, "ConfigMap", f"{FULLNAME}-collector")["data"]["config.yaml"]
    if text.count("0.0.0.0") != 4:  # OTLP gRPC and HTTP, health_check, its own metrics
        raise LookupError("the chart's Collector config no longer listens on four 0.0.0.0 addresses")
    path = work / "collector.yaml"
    path.write_text(text.replace("0.0.0.0", COLLECTOR_IP), encoding="utf-8")
    return path


class CollectorMetrics:
    """The Collector's own metrics (Prometheus text) at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def value(self, name: str) -> float | None:
        """The sum of the samples of ``name`` (None when absent)."""
        status, body = http_get(self.url)
        if status != 200:
            return None
        found = None
        for line in body.decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                found = (found or 0.0) + float(line.rsplit(" ", 1)[1])
        return found

    def wait_backends(self, count: int) -> None:
        """Until the load-balancing exporter routes to ``count`` backends."""
        poll(
            lambda: True if self.value("otelcol_loadbalancer_num_backends") == count else None,
            timeout=TIMEOUT_S,
            what=f"the Collector's resolver at {count} backends",
            interval=0.02,
        )


class Sender(threading.Thread):
    """Sends each trace's children, and the root of the trace ``ROOT_LAG`` before, every ``PACE_S``."""

    def __init__(self, endpoint: str, traces: list[tuple[list[ReadableSpan], list[ReadableSpan]]]) -> None:
        super().__init__(name="scale-sender", daemon=True)
        self.exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=30)
        self.traces = traces
        self.sent = 0  # traces whose children are sent
        self.failed = 0
        self.children_at: list[float] = []  # per trace, when its children were sent (monotonic)
        self.root_at: list[float] = []

    def run(self) -> None:
        count = len(self.traces)
        for index in range(count + ROOT_LAG):
            batch = list(self.traces[index][0]) if index < count else []
            if index >= ROOT_LAG:
                batch += self.traces[index - ROOT_LAG][1]
            sent_at = time.monotonic()
            if self.exporter.export(batch) != SpanExportResult.SUCCESS:
                self.failed += 1
            if index < count:
                self.children_at.append(sent_at)
            if index >= ROOT_LAG:
                self.root_at.append(sent_at)
            self.sent = min(index + 1, count)
            time.sleep(PACE_S)
        self.exporter.shutdown()


def _traces(ids: list[int]) -> list[tuple[list[ReadableSpan], list[ReadableSpan]]]:
    """A trace of each id, as (its children, its root)."""
    traces = []
    for trace_id in ids:
        spans = record(agent_trace, first_trace=trace_id)
        traces.append(([s for s in spans if s.parent is not None], [s for s in spans if s.parent is None]))
    return traces


def _wait_sent(sender: Sender, count: int) -> None:
    poll(lambda: True if sender.sent >= count else None, timeout=TIMEOUT_S, what=f"{count} traces sent")


def _start(stack: ExitStack, process: ManagedProcess) -> None:
    """Start ``process`` (healthy), to be stopped when ``stack`` closes."""
    process.start()
    stack.callback(process.stop)


def run(traces: int, work: Path, *, seed: int, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The scale run: 2 -> 3 -> 2 instances while ``traces`` traces flow; the truth and the counters.

    Traces are numbered 1 to ``traces`` in the result (0: a trace that was not sent).
    """
    bin_dir = tools_bin_dir()
    objects = render(bin_dir / "helm", work, list(overrides))
    budgets = work / "budgets.yaml"
    budgets.write_text(_one(objects, "ConfigMap", f"{FULLNAME}-budgets")["data"]["budgets.yaml"], encoding="utf-8")
    statefulset = _one(objects, "StatefulSet", SERVICE)
    pre_stop = statefulset["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    collector_config = _collector_config(objects, work)
    # Random trace ids (from ``seed``): each run samples other positions on the ring.
    generator = random.Random(seed)
    trace_ids = [generator.getrandbits(128) | 1 for _ in range(traces)]
    number = {trace_id: n for n, trace_id in enumerate(trace_ids, start=1)}  # 0: not a trace sent
    sent = _traces(trace_ids)
    events: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        api = stack.enter_context(running_api_server(bin_dir / "etcd", bin_dir / "kube-apiserver", work))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        if api.request("POST", "/api/v1/namespaces", namespace).status != 201:
            raise RuntimeError("creating the namespace")
        for kind, name in [
            ("ServiceAccount", f"{FULLNAME}-collector"),
            ("Role", f"{FULLNAME}-collector"),
            ("RoleBinding", f"{FULLNAME}-collector"),
            ("Service", SERVICE),
        ]:
            _create(api, _one(objects, kind, name))
        kubeconfig = collector_kubeconfig(api, f"{FULLNAME}-collector", work)

        # Three pods started (the third's readiness not yet reported, so not in the slice).
        instances = []
        for index in range(3):
            hop = NextHop()
            stack.callback(hop.stop)
            instance = _serve_process(statefulset, index, budgets, hop, work)
            _start(stack, instance.process)
            instances.append(instance)
        slice_ = EndpointSlice(api)
        slice_.endpoints = {index: (True, False) for index in range(3) if index != ADDED}
        slice_.write()

        collector = ManagedProcess(
            name="collector",
            argv=[str(bin_dir / "otelcol-latency-budget"), "--config", str(collector_config)],
            env={"KUBECONFIG": str(kubeconfig)},
            log_path=work / "collector.log",
            health_url=f"http://{COLLECTOR_IP}:13133/",
        )
        _start(stack, collector)
        metrics = CollectorMetrics(f"http://{COLLECTOR_IP}:8888/metrics")
        metrics.wait_backends(2)

        sender = Sender(f"http://{COLLECTOR_IP}:4317", sent)
        sender.start()

        # Scale up, once traces are open all the time: the third pod is ready, the
        # controller adds it to the slice.
        _wait_sent(sender, 2 * ROOT_LAG)
        added = instances[ADDED]
        staying = [instance for instance in instances if instance is not added]
        slice_.endpoints[added.index] = (True, False)
        written = time.monotonic()
        slice_.write()
        metrics.wait_backends(3)
        events["scale_up"] = {"written": written, "applied": time.monotonic()}

        # Scale down once every trace open at the scale-up has its root sent and about
        # 2 x ROOT_LAG traces went whole to three instances (the ring's shares), as the
        # kubelet and the controller do it: the endpoint marked terminating (not ready)
        # while the chart's preStop runs; then SIGTERM and the drain; then the pod gone.
        _wait_sent(sender, sender.sent + 3 * ROOT_LAG)
        slice_.endpoints[added.index] = (False, True)
        written = time.monotonic()
        slice_.write()
        pre_stopped = subprocess.Popen(pre_stop)  # the chart's preStop: ["sleep", "5"]
        metrics.wait_backends(2)
        applied = time.monotonic()
        pre_stopped.wait(timeout=TIMEOUT_S)
        sigterm = time.monotonic()
        drained = added.process.stop(timeout=TIMEOUT_S)
        del slice_.endpoints[added.index]
        slice_.write()
        events["scale_down"] = {"written": written, "applied": applied, "sigterm": sigterm}

        sender.join(TIMEOUT_S)
        if sender.is_alive():
            raise RuntimeError("the sender did not finish")

        def settled() -> bool | None:
            seen = sum(len(i.hop.spans()) for i in instances)
            return True if seen >= traces * SPANS_PER_TRACE and _quiet(staying) else None

        poll(settled, timeout=TIMEOUT_S, what="every span at a next hop and nothing held")
        exits = {added.index: drained}
        for instance in staying:
            exits[instance.index] = instance.process.stop(timeout=TIMEOUT_S)
        receiver_metrics = {
            name: metrics.value(name)
            for name in (
                "otelcol_receiver_accepted_spans",
                "otelcol_receiver_refused_spans",
                "otelcol_exporter_sent_spans",
                "otelcol_exporter_send_failed_spans",
            )
        }

    received = []
    roots = []
    for instance in instances:
        for _, _, span in instance.hop.spans():
            trace = number.get(int.from_bytes(span.trace_id, "big"), 0)
            attributes = attributes_of(span.attributes)
            reason = attributes.get(f"{PARTIAL}.reason") if attributes.get(PARTIAL) is True else None
            received.append([trace, int.from_bytes(span.span_id, "big"), instance.index, reason])
            if not span.parent_span_id:
                roots.append({"trace": trace, "instance": instance.index, "attributes": _kept(attributes)})
    return {
        "seed": seed,
        "traces": traces,
        "spans_per_trace": SPANS_PER_TRACE,
        "root_lag": ROOT_LAG,
        "sender_failed": sender.failed,
        "children_at": sender.children_at,
        "root_at": sender.root_at,
        "events": events,
        "pre_stop": pre_stop,
        "exit_codes": {str(k): v for k, v in exits.items()},
        "counters": {str(i.index): i.final_counters() for i in instances},
        "collector": receiver_metrics,
        "received": received,
        "roots": roots,
    }


def _kept(attributes: dict[str, object]) -> dict[str, object]:
    """The root attributes a summary reads: the verdict, the stage times, the partial marking."""
    return {
        key: value
        for key, value in attributes.items()
        if key == "latency_budget.verdict" or key.startswith(PARTIAL) or key.endswith(".actual_ms")
    }


def _quiet(instances: list[Instance]) -> bool:
    """Nothing held or queued in any of ``instances``."""
    for instance in instances:
        status, body = http_get(instance.health_url)
        if status != 200:
            return False
        held = json.loads(body)["held"]
        if held["traces"] or held["forward_queue_spans"]:
            return False
    return True


def judged_whole(attributes: dict[str, object]) -> bool:
    """The root's stage times are those of the whole trace."""
    return (
        attributes.get("latency_budget.stages.retrieval.actual_ms") == RETRIEVAL_MS
        and attributes.get("latency_budget.stages.model_call.actual_ms") == MODEL_MS
    )


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of a run: spans lost and doubled, traces split (rerouted) per event, partial ones marked.

    A trace is split when its spans reached two instances. It was split by the scale-up
    when its root reached the added instance, by the scale-down when its children did.
    The traces open at a change are those whose children were sent before the Collector
    was seen to apply it and whose root after: the share is of those.
    """
    traces = result["traces"]
    counts = Counter((trace_id, span_id) for trace_id, span_id, _, _ in result["received"])
    instances_of: dict[int, set[int]] = {}
    for trace_id, _, instance, _ in result["received"]:
        instances_of.setdefault(trace_id, set()).add(instance)
    root_instance = {root["trace"]: root["instance"] for root in result["roots"]}
    split = sorted(t for t, found in instances_of.items() if len(found) > 1)
    by_event = {
        "scale_up": [t for t in split if root_instance.get(t) == ADDED],
        "scale_down": [t for t in split if root_instance.get(t) != ADDED and ADDED in instances_of[t]],
    }
    sent = {(t, s) for t in range(1, traces + 1) for s in range(1, result["spans_per_trace"] + 1)}
    children_at, root_at = result["children_at"], result["root_at"]
    per_event = {}
    for name, event in result["events"].items():
        applied = event["applied"]
        open_then = [t for t in range(1, traces + 1) if children_at[t - 1] < applied < root_at[t - 1]]
        per_event[name] = {
            "open": len(open_then),
            "split": len(by_event[name]),
            "share": round(len(by_event[name]) / len(open_then), 3) if open_then else 0.0,
            "resolver_lag_ms": round((event["applied"] - event["written"]) * 1000),
        }
    # The added instance's share of the ring: of the traces sent whole while it was in it,
    # those it took (what a change moves, in the long run).
    up, down = result["events"]["scale_up"]["applied"], result["events"]["scale_down"]["written"]
    inside = [t for t in range(1, traces + 1) if up < children_at[t - 1] and root_at[t - 1] < down]
    taken = [t for t in inside if instances_of.get(t) == {ADDED}]
    marked = {trace for trace, _, _, reason in result["received"] if reason is not None}
    roots_marked = {root["trace"] for root in result["roots"] if root["attributes"].get(PARTIAL) is True}
    reasons = Counter(reason for _, _, _, reason in result["received"] if reason is not None)
    counters = result["counters"].values()
    return {
        "seed": result["seed"],
        "traces": traces,
        "spans_sent": len(sent),
        "spans_lost": len(sent - set(counts)),
        "spans_doubled": sum(1 for n in counts.values() if n > 1),
        "spans_unexpected": len(set(counts) - sent),
        "traces_split": len(split),
        "traces_split_otherwise": len(split) - sum(len(found) for found in by_event.values()),
        "events": per_event,
        "ring_share_of_added": round(len(taken) / len(inside), 3) if inside else 0.0,
        # A trace is marked when a span of it carries latency_budget.partial (its root, or
        # the top spans of a rootless part); the reasons count spans.
        "split_marked": len(marked & set(split)),
        "split_roots_marked": len(roots_marked & set(split)),
        "whole_marked": len(marked - set(split)),
        "marks_by_reason": dict(sorted(reasons.items())),
        "traces_partial_counted": sum(c.get("traces_partial", 0) for c in counters),
        "traces_forwarded_unjudged": sum(c["traces_forwarded_unjudged"] for c in counters),
        "traces_judged": sum(c["traces_judged"] for c in counters),
        # serve.handover.enabled: rootless parts sent back through the Collector (their spans
        # go through it twice).
        "traces_handed_over": sum(c.get("traces_handed_over", 0) for c in counters),
        "spans_handed_over": sum(c.get("spans_handed_over", 0) for c in counters),
        "split_traces": split,
        "marked_traces": sorted(marked),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, help="of the trace ids (default: a random one, printed)")
    parser.add_argument("--traces", type=int, default=TRACES, help=f"traces sent (default {TRACES})")
    parser.add_argument("--out", type=Path, help="write the whole result (JSON) here")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a chart value, as helm's --set (repeatable)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    if os.environ.get(INSIDE) != "1":
        unshare = shutil.which("unshare")
        if unshare is None:
            raise SystemExit("unshare (util-linux) is not on PATH")
        rest = sys.argv[1:] if argv is None else argv
        command = [unshare, *NAMESPACES, sys.executable, "-m", "tests.k8s.scale", *rest]
        os.execve(unshare, command, {**os.environ, INSIDE: "1"})
    work = Path(tempfile.mkdtemp(prefix="latency-budget-scale-"))
    try:
        own_network_namespace(work)
        seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
        result = run(args.traces, work, seed=seed, overrides=args.set)
    except BaseException:
        print(f"logs kept in {work}", file=sys.stderr)
        raise
    if args.out is not None:
        args.out.write_text(json.dumps(result), encoding="utf-8")
    summary = summarise(result)
    print(json.dumps({k: v for k, v in summary.items() if not k.endswith("_traces")}, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
