"""Run the real Collector, Jaeger v2, Prometheus, `latency-budget serve` and Node on free loopback ports for e2e tests.

The Collector and Jaeger come from ``scripts/build-tools`` (``$LATENCY_BUDGET_TOOLS_DIR/bin``,
default ``<repo>/.tools/bin``), Prometheus from Debian's ``prometheus`` package. The
collector runs the repository's own ``collector-config.yaml`` and Jaeger the repository's
``jaeger-config.yaml``; only the environment variables those files read are set here (ports,
file paths, sampling knobs). Prometheus gets a config of the test's own: one scrape target
and one rules file. The collector tier runs ``collector-tier.yaml``, ``latency-budget serve``
is this checkout's package (``python -m latency_budget``), and the retrieval service of
``tests/e2e/node`` runs on the ``node`` found on PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

REPO_DIR = Path(__file__).resolve().parents[2]
NODE_SERVICE_DIR = Path(__file__).resolve().parent / "node"
COLLECTOR_CONFIG = REPO_DIR / "collector-config.yaml"
COLLECTOR_TIER_CONFIG = REPO_DIR / "collector-tier.yaml"
JAEGER_CONFIG = REPO_DIR / "jaeger-config.yaml"
JAEGER_UI_CONFIG = REPO_DIR / "jaeger-ui.json"
OTELCOL_BINARY_NAME = "otelcol-latency-budget"
JAEGER_BINARY_NAME = "jaeger"
LOOPBACK = "127.0.0.1"

STARTUP_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.1

T = TypeVar("T")


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """``argv`` run so that Linux sends it SIGTERM when the test process dies, even by SIGKILL.

    util-linux's setpriv sets the parent-death signal and execs the command, so a killed
    test run (a CI timeout) leaves no service running. Elsewhere ``argv`` is unchanged.
    """
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


class ServiceError(RuntimeError):
    """A service did not start, became unhealthy or exited unexpectedly."""


def tools_bin_dir() -> Path:
    """Return the folder that scripts/build-tools puts the binaries in."""
    tools_dir = os.environ.get("LATENCY_BUDGET_TOOLS_DIR") or str(REPO_DIR / ".tools")
    return Path(tools_dir) / "bin"


@dataclass(frozen=True)
class Tools:
    """Paths of the built collector and Jaeger binaries."""

    otelcol: Path
    jaeger: Path


def find_tools() -> tuple[Tools, list[Path]]:
    """Return the expected binaries and the list of those that are missing."""
    bin_dir = tools_bin_dir()
    tools = Tools(otelcol=bin_dir / OTELCOL_BINARY_NAME, jaeger=bin_dir / JAEGER_BINARY_NAME)
    missing = [path for path in (tools.otelcol, tools.jaeger) if not os.access(path, os.X_OK)]
    return tools, missing


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct loopback ports that were free a moment ago."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def http_get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url``; return (status, body), with status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def poll(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = POLL_INTERVAL_S,
) -> T:
    """Call ``probe`` until it returns a value other than None; raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class ManagedProcess:
    """A child process with its output in a log file, that can be stopped and started again."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    health_url: str
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log_file: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def running(self) -> bool:
        """Whether the process has been started and has not exited."""
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Start the process (appending to its log) and wait until it reports healthy."""
        if self.running:
            raise ServiceError(f"{self.name} is already running")
        self._log_file = self.log_path.open("ab")
        self._log_file.write(f"=== starting: {' '.join(self.argv)}\n".encode())
        self._log_file.flush()
        self._process = subprocess.Popen(
            _with_parent_death_signal(self.argv),
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # keeps Ctrl-C in the terminal from hitting it first
        )
        try:
            self.wait_healthy(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self, *, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Poll the health URL until it answers 200; fail early if the process exits."""

        def probe() -> bool | None:
            if not self.running:
                raise ServiceError(
                    f"{self.name} exited with code {self.returncode} before becoming healthy\n{self.log_tail()}"
                )
            status, _ = http_get(self.health_url, timeout=1.0)
            return True if status == 200 else None

        try:
            poll(probe, timeout=timeout, what=f"{self.name} health at {self.health_url}")
        except TimeoutError as error:
            raise ServiceError(f"{error}\n{self.log_tail()}") from None

    def stop(self, *, timeout: float = SHUTDOWN_TIMEOUT_S) -> int | None:
        """Stop the process gracefully (SIGTERM), killing it if it does not exit in time.

        Returns its exit code (negative: killed by that signal), None if it was not started.
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return None if process is None else process.returncode

    def kill(self, *, timeout: float = SHUTDOWN_TIMEOUT_S) -> int | None:
        """Kill the process at once (SIGKILL: a crash, nothing flushed); its exit code, None if it was not started."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return None if process is None else process.returncode

    @property
    def returncode(self) -> int | None:
        """Exit code of the current process, None while it runs or before it started."""
        return None if self._process is None else self._process.poll()

    def log_text(self) -> str:
        """Everything the process has written to its log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 200) -> str:
        """The last ``lines`` lines of the log, headed by the log's path."""
        tail = "\n".join(self.log_text().splitlines()[-lines:])
        return f"--- {self.name} log ({self.log_path}), last {lines} lines ---\n{tail}"


@dataclass
class JaegerService:
    """Jaeger v2 with in-memory storage; endpoints are on 127.0.0.1."""

    process: ManagedProcess
    otlp_grpc_endpoint: str  # host:port, what the collector exports to
    query_url: str  # http://host:port, UI and HTTP API

    def find_traces(self, **params: str) -> list[dict[str, object]]:
        """Query ``/api/traces`` with the given parameters; return the ``data`` list."""
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.query_url}/api/traces?{query}")
        if status != 200:
            raise ServiceError(f"Jaeger /api/traces answered {status}: {body[:500]!r}")
        data = json.loads(body).get("data") or []
        return list(data)

    def get_trace(self, trace_id: str) -> dict[str, object] | None:
        """Return ``/api/traces/{trace_id}``'s trace, or None while Jaeger does not have it."""
        status, body = http_get(f"{self.query_url}/api/traces/{trace_id}")
        if status == 404:
            return None
        if status != 200:
            raise ServiceError(f"Jaeger /api/traces/{trace_id} answered {status}: {body[:500]!r}")
        data = json.loads(body).get("data") or []
        return dict(data[0]) if data else None


@dataclass
class CollectorService:
    """The collector running collector-config.yaml; endpoints are on 127.0.0.1."""

    process: ManagedProcess
    otlp_grpc_endpoint: str  # http://host:port, for OTLP gRPC exporters
    otlp_http_endpoint: str  # http://host:port, for OTLP HTTP exporters (+ /v1/traces ...)
    prometheus_url: str  # http://host:port/metrics
    health_url: str
    logs_file: Path  # file exporter output for logs, OTLP JSON lines
    traces_file: Path  # file exporter output for sampled traces, OTLP JSON lines

    def stop(self) -> None:
        """Stop the collector (graceful shutdown); its ports and files stay the same."""
        self.process.stop()

    def start(self) -> None:
        """Start the collector again on the same ports and wait until it is healthy."""
        self.process.start()

    def restart(self) -> None:
        """Stop and start the collector."""
        self.stop()
        self.start()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Keep the collector stopped inside the block; it is started again afterwards."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def scrape(self) -> str:
        """Return the current Prometheus exposition text ('' when unreachable)."""
        status, body = http_get(self.prometheus_url)
        return body.decode(errors="replace") if status == 200 else ""


def start_jaeger(tools: Tools, work_dir: Path) -> JaegerService:
    """Start Jaeger on free loopback ports and wait until it is healthy."""
    otlp_grpc, otlp_http, query_http, query_grpc, health, metrics = free_ports(6)
    env = {
        "JAEGER_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{otlp_grpc}",
        "JAEGER_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{otlp_http}",
        "JAEGER_QUERY_HTTP_ENDPOINT": f"{LOOPBACK}:{query_http}",
        "JAEGER_QUERY_GRPC_ENDPOINT": f"{LOOPBACK}:{query_grpc}",
        "JAEGER_HEALTH_CHECK_ENDPOINT": f"{LOOPBACK}:{health}",
        "JAEGER_TELEMETRY_METRICS_HOST": LOOPBACK,
        "JAEGER_TELEMETRY_METRICS_PORT": str(metrics),
        "JAEGER_UI_CONFIG_FILE": str(JAEGER_UI_CONFIG),
    }
    process = ManagedProcess(
        name="jaeger",
        argv=[str(tools.jaeger), "--config", str(JAEGER_CONFIG)],
        env=env,
        log_path=work_dir / "jaeger.log",
        health_url=f"http://{LOOPBACK}:{health}/status",
    )
    process.start()
    service = JaegerService(
        process=process,
        otlp_grpc_endpoint=f"{LOOPBACK}:{otlp_grpc}",
        query_url=f"http://{LOOPBACK}:{query_http}",
    )
    # Health covers the extensions' start; make sure the query API itself answers too.
    try:
        poll(
            lambda: True if http_get(f"{service.query_url}/api/services")[0] == 200 else None,
            timeout=STARTUP_TIMEOUT_S,
            what="Jaeger query API",
        )
    except TimeoutError as error:
        process.stop()
        raise ServiceError(f"{error}\n{process.log_tail()}") from None
    return service


def start_collector(
    tools: Tools,
    work_dir: Path,
    *,
    jaeger_otlp_endpoint: str,
    extra_env: Mapping[str, str] | None = None,
) -> CollectorService:
    """Start the collector with collector-config.yaml on free loopback ports."""
    otlp_grpc, otlp_http, prometheus, health, metrics = free_ports(5)
    logs_file = work_dir / "otelcol" / "logs.jsonl"
    traces_file = work_dir / "otelcol" / "traces.jsonl"
    env = {
        "OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{otlp_grpc}",
        "OTELCOL_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{otlp_http}",
        "OTELCOL_PROMETHEUS_ENDPOINT": f"{LOOPBACK}:{prometheus}",
        "OTELCOL_HEALTH_CHECK_ENDPOINT": f"{LOOPBACK}:{health}",
        "OTELCOL_TELEMETRY_METRICS_HOST": LOOPBACK,
        "OTELCOL_TELEMETRY_METRICS_PORT": str(metrics),
        "OTELCOL_LOGS_FILE": str(logs_file),
        "OTELCOL_TRACES_FILE": str(traces_file),
        "JAEGER_OTLP_ENDPOINT": jaeger_otlp_endpoint,
        **(extra_env or {}),
    }
    health_url = f"http://{LOOPBACK}:{health}/"
    process = ManagedProcess(
        name="otelcol",
        argv=[str(tools.otelcol), "--config", str(COLLECTOR_CONFIG)],
        env=env,
        log_path=work_dir / "otelcol.log",
        health_url=health_url,
    )
    process.start()
    return CollectorService(
        process=process,
        otlp_grpc_endpoint=f"http://{LOOPBACK}:{otlp_grpc}",
        otlp_http_endpoint=f"http://{LOOPBACK}:{otlp_http}",
        prometheus_url=f"http://{LOOPBACK}:{prometheus}/metrics",
        health_url=health_url,
        logs_file=logs_file,
        traces_file=traces_file,
    )


@dataclass
class PrometheusService:
    """A real Prometheus (Debian's package) scraping one target and loading one rules file; on 127.0.0.1."""

    process: ManagedProcess
    url: str  # http://host:port, the UI and HTTP API

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; return its ``data``, raising when Prometheus reports an error."""
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""))
        if status != 200:
            raise ServiceError(f"Prometheus /api/v1/{path} answered {status}: {body[:500]!r}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise ServiceError(f"Prometheus /api/v1/{path}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector, as (labels, value) pairs."""
        data = self.api("query", query=expr)
        return [(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]


def start_prometheus(
    binary: str,
    work_dir: Path,
    *,
    scrape_urls: Mapping[str, str],
    rules_file: Path | None = None,
    interval: str = "1s",
) -> PrometheusService:
    """Start Prometheus on a free loopback port, scraping each ``job: url`` (and evaluating ``rules_file``)."""
    (port,) = free_ports(1)
    jobs = []
    for job, scrape_url in scrape_urls.items():
        target = urllib.parse.urlsplit(scrape_url)
        jobs.append(
            {
                "job_name": job,
                "metrics_path": target.path or "/metrics",
                "static_configs": [{"targets": [target.netloc]}],
            }
        )
    document: dict[str, object] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }
    if rules_file is not None:
        document["rule_files"] = [str(rules_file)]
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    config.write_text(json.dumps(document, indent=2), encoding="utf-8")  # JSON is YAML: no quoting to get wrong
    url = f"http://{LOOPBACK}:{port}"
    process = ManagedProcess(
        name="prometheus",
        argv=[
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work_dir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
        ],
        env={},
        log_path=work_dir / "prometheus.log",
        health_url=f"{url}/-/ready",
    )
    process.start()
    return PrometheusService(process=process, url=url)


@dataclass
class TierCollectorService:
    """The collector running collector-tier.yaml (load-balancing to serve instances); endpoints on 127.0.0.1."""

    process: ManagedProcess
    otlp_grpc_endpoint: str  # http://host:port, for OTLP gRPC exporters
    otlp_http_endpoint: str  # http://host:port, for OTLP HTTP exporters (+ /v1/traces)
    telemetry_url: str  # http://host:port/metrics: the collector's own metrics


def start_tier_collector(
    tools: Tools,
    work_dir: Path,
    *,
    backends: list[str],
    extra_env: Mapping[str, str] | None = None,
    otlp_grpc_port: int | None = None,
) -> TierCollectorService:
    """Start the collector with collector-tier.yaml on free loopback ports, routing to ``backends`` (host:port).

    ``otlp_grpc_port``: its OTLP/gRPC port instead of a free one (a restart keeps its address).
    """
    otlp_grpc, otlp_http, health, metrics = free_ports(4)
    otlp_grpc = otlp_grpc_port if otlp_grpc_port is not None else otlp_grpc
    env = {
        "OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{otlp_grpc}",
        "OTELCOL_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{otlp_http}",
        "OTELCOL_HEALTH_CHECK_ENDPOINT": f"{LOOPBACK}:{health}",
        "OTELCOL_TELEMETRY_METRICS_HOST": LOOPBACK,
        "OTELCOL_TELEMETRY_METRICS_PORT": str(metrics),
        "OTELCOL_TIER_BACKENDS": json.dumps(backends),  # a JSON list is a YAML list
        **(extra_env or {}),
    }
    process = ManagedProcess(
        name="otelcol-tier",
        argv=[str(tools.otelcol), "--config", str(COLLECTOR_TIER_CONFIG)],
        env=env,
        log_path=work_dir / "otelcol-tier.log",
        health_url=f"http://{LOOPBACK}:{health}/",
    )
    process.start()
    return TierCollectorService(
        process=process,
        otlp_grpc_endpoint=f"http://{LOOPBACK}:{otlp_grpc}",
        otlp_http_endpoint=f"http://{LOOPBACK}:{otlp_http}",
        telemetry_url=f"http://{LOOPBACK}:{metrics}/metrics",
    )


@dataclass
class ServeService:
    """One `latency-budget serve` process (this checkout's package); its ports stay the same across restarts."""

    process: ManagedProcess
    grpc_endpoint: str  # host:port, what the tier collector sends to
    health_url: str

    def health(self) -> dict[str, Any]:
        """The document of GET /health (counters, held); raises ServiceError when it does not answer 200."""
        status, body = http_get(self.health_url)
        if status != 200:
            raise ServiceError(f"{self.process.name} /health answered {status}: {body[:500]!r}")
        return dict(json.loads(body))

    def counters(self) -> dict[str, int]:
        """The counters of GET /health; raises ServiceError when it does not answer 200."""
        return {str(key): int(value) for key, value in self.health()["counters"].items()}


def start_serve(
    work_dir: Path,
    *,
    name: str,
    budgets: Path,
    forward_endpoint: str,
    args: list[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> ServeService:
    """Start ``python -m latency_budget serve`` on free loopback ports (OTLP/gRPC and health only)."""
    grpc, health = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "latency_budget",
        "serve",
        "--budgets",
        str(budgets),
        "--grpc-endpoint",
        f"{LOOPBACK}:{grpc}",
        "--http-endpoint",
        "none",
        "--health-endpoint",
        f"{LOOPBACK}:{health}",
        "--forward-endpoint",
        forward_endpoint,
        *(args or []),
    ]
    health_url = f"http://{LOOPBACK}:{health}/health"
    process = ManagedProcess(
        name=name, argv=argv, env=dict(extra_env or {}), log_path=work_dir / f"{name}.log", health_url=health_url
    )
    process.start()
    return ServeService(process=process, grpc_endpoint=f"{LOOPBACK}:{grpc}", health_url=health_url)


@dataclass
class NodeService:
    """tests/e2e/node/retrieval-service.js on Node: its own OpenTelemetry SDK exporting OTLP/HTTP."""

    process: ManagedProcess
    url: str  # http://host:port


def start_retrieval_service(node: str, work_dir: Path, *, otlp_http_endpoint: str, service_name: str) -> NodeService:
    """Start the Node retrieval service on a free loopback port, exporting its spans to ``otlp_http_endpoint``."""
    (port,) = free_ports(1)
    url = f"http://{LOOPBACK}:{port}"
    env = {
        "RETRIEVAL_SERVICE_PORT": str(port),
        "OTEL_SERVICE_NAME": service_name,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_http_endpoint,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    process = ManagedProcess(
        name="retrieval-service (node)",
        argv=[node, str(NODE_SERVICE_DIR / "retrieval-service.js")],
        env=env,
        log_path=work_dir / "retrieval-service.log",
        health_url=f"{url}/health",
    )
    process.start()
    return NodeService(process=process, url=url)
