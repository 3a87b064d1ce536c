"""``latency-budget serve`` as a process: the listening line, options and their variables, SIGTERM drain."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from latency_budget.cli._main import main
from tests.e2e.services import poll

from .harness import NextHop, record, send_grpc
from .test_judging import agent_trace

BUDGET_FILE = """\
version: 1
stages:
  retrieval:
    budget_ms: 50
    match: {name: "retrieve*"}
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
total_ms: 300
"""


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


@pytest.fixture
def budget_file(tmp_path: Path) -> Path:
    path = tmp_path / "budgets.yaml"
    path.write_text(BUDGET_FILE)
    return path


def _start(budget_file: Path, hop: NextHop, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "latency_budget", "serve", "--budgets", str(budget_file), *extra]
    environment = {
        **os.environ,
        "LATENCY_BUDGET_SERVE_GRPC_ENDPOINT": "127.0.0.1:0",
        "LATENCY_BUDGET_SERVE_HTTP_ENDPOINT": "127.0.0.1:0",
        "LATENCY_BUDGET_SERVE_HEALTH_ENDPOINT": "127.0.0.1:0",
        "LATENCY_BUDGET_SERVE_REPORTS": "none",
        "OTEL_EXPORTER_OTLP_ENDPOINT": hop.url,
        **(env or {}),
    }
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=environment)


def _listening(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stderr is not None
    line = process.stderr.readline()  # blocks until the server has bound its ports (or died)
    try:
        event = json.loads(line)
        assert event["event"] == "listening", line
    except BaseException:
        process.kill()
        process.wait()
        raise
    return dict(event)


def _counters(health: object) -> dict[str, int] | None:
    try:
        with urllib.request.urlopen(f"http://{health}/health", timeout=5) as response:
            return dict(json.loads(response.read())["counters"])
    except OSError:
        return None


def _drain(process: subprocess.Popen[str], health: object, counter: str, value: int, timeout: float) -> list[Any]:
    """Once ``counter`` reads ``value``, SIGTERM the server; its JSON log lines once it exited 0 within ``timeout``."""
    try:
        poll(
            lambda: ((c := _counters(health)) is not None and c[counter] == value) or None,
            timeout=30,
            what=f"{counter} == {value}",
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=timeout) == 0
        assert process.stderr is not None
        return [json.loads(line) for line in process.stderr.read().splitlines()]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_judges_what_is_held_forwards_the_rest_and_exits_0(budget_file: Path, hop: NextHop) -> None:
    """On SIGTERM a rooted trace is judged, a rootless one forwarded unjudged, and the process exits 0."""
    process = _start(budget_file, hop, "--decision-wait", "600")
    listening = _listening(process)
    spans = record(agent_trace, first_trace=1)
    rootless = [s for s in record(agent_trace, first_trace=2) if s.parent is not None]
    assert send_grpc(spans + rootless, str(listening["grpc"])).name == "SUCCESS"
    events = _drain(process, listening["health"], "spans_received", 7, timeout=30)
    shutdown = next(e for e in events if e["event"] == "shutdown")
    assert shutdown["counters"]["traces_judged"] == 1
    assert shutdown["counters"]["traces_forwarded_unjudged"] == 1
    assert shutdown["counters"]["spans_forwarded"] == 7
    assert len(hop.spans()) == 7


def test_option_beats_its_environment_variable(budget_file: Path, hop: NextHop) -> None:
    """--roots on the command line wins over LATENCY_BUDGET_SERVE_ROOTS; the listening line says which is used."""
    process = _start(budget_file, hop, "--roots", "local", env={"LATENCY_BUDGET_SERVE_ROOTS": "trace"})
    try:
        assert _listening(process)["roots"] == "local"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "--budgets FILE (or LATENCY_BUDGET_SERVE_BUDGETS) is required"),
        (["--decision-wait", "soon"], {}, "--decision-wait: expected a number of seconds, got 'soon'"),
        ([], {"LATENCY_BUDGET_SERVE_MAX_TRACES": "-3"}, "LATENCY_BUDGET_SERVE_MAX_TRACES: expected a positive whole"),
        (["--roots", "all"], {}, "--roots: expected one of trace, local, got 'all'"),
        (["--grpc-endpoint", "4317"], {}, "--grpc-endpoint: expected HOST:PORT"),
        (["--forward-endpoint", "jaeger:4317"], {}, "--forward-endpoint: expected a URL"),
    ],
)
def test_bad_option_is_one_line_and_exit_2(
    budget_file: Path,
    argv: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad option or variable is one line naming it, and exit status 2, before anything listens."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    budgets = [] if "required" in message else ["--budgets", str(budget_file)]
    assert main(["serve", *budgets, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_sigterm_with_the_next_hop_down_drops_and_counts_what_it_held(budget_file: Path, hop: NextHop) -> None:
    """With the next hop unreachable, SIGTERM still exits 0 at the deadline, counting the unsent spans as dropped."""
    hop.stop()
    process = _start(
        budget_file,
        hop,
        "--shutdown-timeout",
        "2",
        env={"LATENCY_BUDGET_SERVE_REPORTS": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"},
    )
    listening = _listening(process)
    assert send_grpc(record(agent_trace), str(listening["grpc"])).name == "SUCCESS"
    events = _drain(process, listening["health"], "traces_judged", 1, timeout=60)
    assert "next_hop_down" in [e["event"] for e in events]
    shutdown = next(e for e in events if e["event"] == "shutdown")
    assert shutdown["counters"]["spans_dropped"] == 4
    assert shutdown["counters"]["spans_forwarded"] == 0


def test_address_in_use_is_one_line_and_exit_2(budget_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A listen address another process holds is one line naming the problem, and exit status 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            [
                "serve",
                "--budgets",
                str(budget_file),
                "--grpc-endpoint",
                "127.0.0.1:0",
                "--http-endpoint",
                "none",
                "--health-endpoint",
                f"127.0.0.1:{port}",
                "--reports",
                "none",
                "--forward-endpoint",
                "http://127.0.0.1:9",
            ]
        )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "cannot listen" in err[0]
