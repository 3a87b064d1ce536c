"""Session fixtures that run the real Collector and Jaeger v2 for the end-to-end tests.

Build the binaries first with ``scripts/build-tools``. Without them the e2e tests are
skipped, except under ``CI=true``, where a missing binary fails them: CI must not go green
by testing nothing.

Fixtures:
    otel_tools      Tools: paths of the built binaries (skips/fails when missing)
    e2e_work_dir    Path: session temp dir with the services' logs and exporter files
    jaeger          JaegerService: Jaeger v2, in-memory storage, on free loopback ports
    otel_collector  CollectorService: the collector running collector-config.yaml, exporting
                    to ``jaeger``; tail sampling keeps only latency-budget violations
                    (OTELCOL_TRACES_SAMPLING_PERCENTAGE=0) and decides after 1s.
                    ``otel_collector.stopped()`` / ``.restart()`` simulate an outage.
    otel_collector_keep_all
                    CollectorService: a second collector, same config and Jaeger, that keeps
                    every trace (OTELCOL_TRACES_SAMPLING_PERCENTAGE=100), for tests that look
                    at traces within budget too.
    private_collector
                    CollectorService: a collector of the test's own (keeps every trace), for
                    tests that stop and restart it; stopped after the test.
    attach_log      Callable[[ManagedProcess], None]: attaches the log of a process the test
                    starts itself to the report, should the test fail.
    service_name    str: a service.name unique to the test, so that searches in the shared
                    Jaeger and the shared Prometheus endpoint see only the test's own data.
    prometheus_binary
                    str: the path of Debian's ``prometheus`` (skips, or fails under CI=true,
                    when missing); tests start their own Prometheus with ``start_prometheus``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from ..binaries import require_program
from ..ci import skip_or_fail_in_ci
from .services import (
    CollectorService,
    JaegerService,
    ManagedProcess,
    Tools,
    find_tools,
    start_collector,
    start_jaeger,
)

# Services started in this session, whose logs are attached to failing test reports.
_started: list[ManagedProcess] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each service's log to the report of a failing e2e test."""
    report = yield
    if report.failed:
        for process in _started:
            report.sections.append((f"{process.name} log", process.log_tail()))
    return report


@pytest.fixture
def attach_log() -> Iterator[Callable[[ManagedProcess], None]]:
    """Call it with a process the test starts itself, to have its log attached should the test fail."""
    attached: list[ManagedProcess] = []

    def attach(process: ManagedProcess) -> None:
        attached.append(process)
        _started.append(process)

    yield attach
    for process in attached:
        _started.remove(process)


@pytest.fixture(scope="session")
def otel_tools() -> Tools:
    """Paths of the built collector and Jaeger; skip (or fail under CI=true) if missing."""
    tools, missing = find_tools()
    if missing:
        reason = (
            "e2e binaries not built: missing " + ", ".join(str(path) for path in missing) + "; run scripts/build-tools"
        )
        skip_or_fail_in_ci(reason)
    return tools


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Path of the prometheus server; skip (or fail under CI=true) if missing."""
    return require_program("prometheus", install="apt-get install prometheus")


@pytest.fixture(scope="session")
def e2e_work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session temp folder for service logs and the collector's file exporter output."""
    return tmp_path_factory.mktemp("e2e-services")


@pytest.fixture(scope="session")
def jaeger(otel_tools: Tools, e2e_work_dir: Path) -> Iterator[JaegerService]:
    """Jaeger v2 with in-memory storage on free loopback ports, stopped after the session."""
    service = start_jaeger(otel_tools, e2e_work_dir)
    _started.append(service.process)
    try:
        yield service
    finally:
        service.process.stop()


@pytest.fixture(scope="session")
def otel_collector(otel_tools: Tools, e2e_work_dir: Path, jaeger: JaegerService) -> Iterator[CollectorService]:
    """The collector running collector-config.yaml, exporting traces to ``jaeger``."""
    service = start_collector(
        otel_tools,
        e2e_work_dir,
        jaeger_otlp_endpoint=jaeger.otlp_grpc_endpoint,
        extra_env={
            # Keep only traces that violated a budget, so tests can tell sampled from
            # dropped, and decide quickly instead of after the production default of 10s.
            "OTELCOL_TRACES_SAMPLING_PERCENTAGE": "0",
            "OTELCOL_TAIL_SAMPLING_DECISION_WAIT": "1s",
        },
    )
    _started.append(service.process)
    try:
        yield service
    finally:
        service.stop()


# Tail sampling keeps every trace, and decides after 1s instead of the production 10s.
_KEEP_ALL = {"OTELCOL_TRACES_SAMPLING_PERCENTAGE": "100", "OTELCOL_TAIL_SAMPLING_DECISION_WAIT": "1s"}


def _start_collector(tools: Tools, work_dir: Path, jaeger: JaegerService) -> CollectorService:
    work_dir.mkdir(parents=True, exist_ok=True)
    service = start_collector(tools, work_dir, jaeger_otlp_endpoint=jaeger.otlp_grpc_endpoint, extra_env=_KEEP_ALL)
    service.process.name = f"otelcol ({work_dir.name})"
    _started.append(service.process)
    return service


@pytest.fixture(scope="session")
def otel_collector_keep_all(otel_tools: Tools, e2e_work_dir: Path, jaeger: JaegerService) -> Iterator[CollectorService]:
    """A second collector running collector-config.yaml into ``jaeger`` that keeps every trace."""
    service = _start_collector(otel_tools, e2e_work_dir / "keep-all", jaeger)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def private_collector(otel_tools: Tools, tmp_path: Path, jaeger: JaegerService) -> Iterator[CollectorService]:
    """A collector of this test's own (keeps every trace), free to be stopped and restarted."""
    service = _start_collector(otel_tools, tmp_path / "private-collector", jaeger)
    try:
        yield service
    finally:
        service.stop()
        _started.remove(service.process)


@pytest.fixture
def service_name(request: pytest.FixtureRequest) -> str:
    """A service.name unique to this test, so the shared Jaeger and Prometheus hold only its data."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name.removeprefix("test_"))[:40].strip("-")
    return f"e2e-{readable}-{uuid.uuid4().hex[:8]}"
