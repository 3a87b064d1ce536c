"""``latency-budget check``: the CI gate, its exit codes and its three output formats."""

from __future__ import annotations

import json
import socket
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from latency_budget.cli._check import checks_for
from latency_budget.cli._stats import StageSummary

from .conftest import BUDGETS, JAEGER_SEARCH, OTLP, assert_one_line_error, expected_reports, run_cli


def _p(values: list[float], q: int) -> float:
    """Oracle: the standard library's inclusive (linear) percentile."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _check(payload: dict[str, object], profile: str, stage: str, metric: str) -> dict[str, object]:
    checks = payload["checks"]
    assert isinstance(checks, list)
    return next(c for c in checks if (c["profile"], c["stage"], c["metric"]) == (profile, stage, metric))


def test_fixture_fails_on_error_level_budgets_with_exit_1() -> None:
    """The recording breaks model_call's p95 budget: exit 1, the row marked, a FAIL verdict naming it."""
    result = run_cli("check", OTLP, "--budgets", BUDGETS)
    assert result.returncode == 1, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("default | model_call | p95 duration"))
    assert row.endswith("FAIL <-- over budget")
    assert result.stdout.rstrip().splitlines()[-1].startswith("FAIL: 3 of 16 checks over an error-level budget: ")
    assert "model_call p95 duration" in result.stdout.rstrip().splitlines()[-1]
    assert result.stderr == ""


def test_json_percentiles_match_the_processor_reports() -> None:
    """--format json reports each stage's p95 as computed from the processor's own per-request figures."""
    result = run_cli("check", OTLP, "-b", BUDGETS, "--format", "json")
    payload = json.loads(result.stdout)
    assert payload["status"] == "fail"
    assert payload["exit_code"] == result.returncode == 1
    assert payload["requests"] == len(expected_reports())
    for profile in ("default", "voice"):
        reports = [r for r in expected_reports() if r["profile"] == profile]
        for stage in ("retrieval", "model_call", "tool_calls"):
            actuals = [r["stages"][stage]["actual_ms"] for r in reports if stage in r["stages"]]
            check = _check(payload, profile, stage, "duration")
            assert check["actual"] == pytest.approx(_p(actuals, 95))
            assert check["count"] == len(actuals)
        totals = [r["total_actual_ms"] for r in reports]
        assert _check(payload, profile, "total", "duration")["actual"] == pytest.approx(_p(totals, 95))


def test_jaeger_json_gives_the_same_checks_as_otlp_json() -> None:
    """The same recording as Jaeger JSON passes and fails the same checks, with the same numbers to the microsecond."""
    otlp = json.loads(run_cli("check", OTLP, "-b", BUDGETS, "-f", "json").stdout)
    jaeger = json.loads(run_cli("check", JAEGER_SEARCH, "-b", BUDGETS, "-f", "json").stdout)
    assert [(c["stage"], c["metric"], c["outcome"]) for c in jaeger["checks"]] == [
        (c["stage"], c["metric"], c["outcome"]) for c in otlp["checks"]
    ]
    for mine, theirs in zip(jaeger["checks"], otlp["checks"], strict=True):
        assert mine["actual"] == pytest.approx(theirs["actual"], abs=0.02)


def test_lower_percentile_passes_with_exit_0() -> None:
    """At p50 the same recording is within every budget: PASS and exit 0."""
    result = run_cli("check", OTLP, "-b", BUDGETS, "--percentile", "p50")
    assert result.returncode == 0, result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("PASS: 16 checks at p50 within budget")


def test_warn_severity_reports_but_passes(tmp_path: Path) -> None:
    """Budgets of severity warn that fail are shown as warnings; the exit code stays 0."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(
        "version: 1\nseverity: warn\ntotal_ms: 100\nstages:\n  model_call: {budget_ms: 10, severity: warn}\n",
        encoding="utf-8",
    )
    result = run_cli("check", OTLP, "-b", budgets)
    assert result.returncode == 0, result.stdout
    assert "warn (over budget)" in result.stdout
    assert "PASS" in result.stdout.splitlines()[-1]
    assert "warnings" in result.stdout.splitlines()[-1]


def test_violation_rate_ceiling_fails_a_stage_whose_percentile_passes() -> None:
    """--max-violation-rate fails model_call when more requests break it than allowed, even at p50."""
    strict = run_cli("check", OTLP, "-b", BUDGETS, "-p", "p50", "--max-violation-rate", "5%", "-f", "json")
    assert strict.returncode == 1
    payload = json.loads(strict.stdout)
    rate = _check(payload, "default", "model_call", "violation_rate")
    reports = [r for r in expected_reports() if r["profile"] == "default" and "model_call" in r["stages"]]
    broke = [r for r in reports if any(v.startswith("model_call:") for v in r["violations"])]
    assert rate["actual"] == pytest.approx(len(broke) / len(reports))
    assert rate["budget"] == 0.05
    assert rate["outcome"] == "fail"
    lenient = run_cli("check", OTLP, "-b", BUDGETS, "-p", "p50", "--max-violation-rate", "0.9")
    assert lenient.returncode == 0


def test_markdown_is_a_ci_summary() -> None:
    """--format markdown gives a heading with the verdict and a table with one row per check."""
    result = run_cli("check", OTLP, "-b", BUDGETS, "--format", "markdown")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "### ❌ Latency budgets: FAIL"
    assert "| Profile | Stage | Check | Budget | Actual | n | Result |" in lines
    assert any(line.startswith("| default | `model_call` | p95 duration | 3500ms |") and "❌" in line for line in lines)
    assert sum(1 for line in lines if line.startswith("| default |") or line.startswith("| voice |")) == 16


def test_checks_for_applies_each_budget_kind_once() -> None:
    """A stage with duration, first-token and call budgets gets duration, first-token and (if asked) rate checks."""
    stage = StageSummary(
        profile="default",
        stage="model_call",
        budget_ms=100,
        severity="error",
        requests=4,
        actual_ms=(50.0, 90.0, 120.0, 400.0),
        violations=2,
        first_token_ms=(10.0, 20.0),
        first_token_budget_ms=15,
        calls=(1, 1, 2, 5),
        max_calls=3,
    )
    checks = checks_for(stage, 50, 0.4)
    assert [(c.metric, c.actual, c.passed) for c in checks] == [
        ("duration", 105.0, False),
        ("first_token", 15.0, True),
        ("violation_rate", 0.5, False),
    ]
    tracked = StageSummary("default", "x", None, "error", 2, (1.0, 2.0), 0)
    assert checks_for(tracked, 95, 0.1) == []


# -- bad input ---------------------------------------------------------------------------------


def test_truncated_line_names_the_file_and_line(tmp_path: Path) -> None:
    """A JSON line cut short (a collector killed mid-write) is exit 2, naming file and line, and nothing on stdout."""
    lines = OTLP.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "traces.jsonl"
    broken.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2], *lines[2:]]) + "\n", encoding="utf-8")
    assert_one_line_error(run_cli("check", broken, "-b", BUDGETS), f"{broken}:2: truncated JSON")


def test_one_bad_file_among_good_ones_prints_no_result(tmp_path: Path) -> None:
    """With several files, a bad one fails the whole command: no partial table."""
    bad = tmp_path / "notes.txt"
    bad.write_text('{"spans": 1}\n', encoding="utf-8")
    assert_one_line_error(run_cli("check", OTLP, bad, "-b", BUDGETS), f"{bad}:1: unknown trace format")


def test_unreachable_jaeger_names_the_url() -> None:
    """A Jaeger URL nobody listens on is exit 2 with the URL in the message."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = run_cli("check", "--jaeger", url, "--service", "support-assistant", "-b", BUDGETS)
    assert_one_line_error(result, url, "cannot reach Jaeger")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["check", OTLP], ["--budgets FILE is needed to check a recording other than the demo's", "init"]),
        (
            ["check", "/nonexistent.jsonl", "-b", BUDGETS],
            ["/nonexistent.jsonl: cannot read: No such file or directory"],
        ),
        (["check", "-b", BUDGETS], ["no traces given"]),
        (["check", OTLP, "-b", BUDGETS, "--percentile", "fast"], ["expected p50, p95 or p99, got 'fast'"]),
        (["check", OTLP, "-b", BUDGETS, "--max-violation-rate", "150%"], ["expected a share between 0 and 1"]),
        (["check", "--jaeger", "http://x", "-b", BUDGETS], ["--jaeger needs --service NAME"]),
        (["check", "--jaeger", "localhost:16686", "--service", "s", "-b", BUDGETS], ["--jaeger: expected the query"]),
        (["check", "--jaeger", "http://x", "--service", "s", "--lookback", "soon", "-b", BUDGETS], ["--lookback"]),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], fragments: list[str]) -> None:
    """Missing or malformed arguments and unreadable files: one line on stderr, exit 2."""
    assert_one_line_error(run_cli(*args), *fragments)


def test_bad_budget_file_is_exit_2_with_its_line(tmp_path: Path) -> None:
    """An invalid budget file is unusable input for check: exit 2 with the loader's file:line message."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("version: 1\nstages:\n  model_call: {budget_ms: fast}\n", encoding="utf-8")
    assert_one_line_error(run_cli("check", OTLP, "-b", budgets), f"{budgets}:3: stages.model_call.budget_ms")


def test_no_matching_spans_says_so(tmp_path: Path) -> None:
    """When no span matches any stage of the budget file, check says so and exits 2 instead of passing."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("version: 1\nstages:\n  search: {budget_ms: 10, match: {name: 'elastic *'}}\n", encoding="utf-8")
    assert_one_line_error(run_cli("check", OTLP, "-b", budgets), "no span matched a stage", "stages: search")


def test_requests_rules_choose_the_roots_that_are_judged(tmp_path: Path) -> None:
    """`requests` matching the demo's server roots judges them all; one matching none is exit 2, saying so."""
    text = Path(BUDGETS).read_text(encoding="utf-8")
    servers = tmp_path / "servers.yaml"
    servers.write_text(text.replace("version: 1\n", "version: 1\nrequests: {kind: server}\n"), encoding="utf-8")
    result = run_cli("check", OTLP, "-b", servers, "--format", "json")
    assert json.loads(result.stdout)["requests"] == len(expected_reports())
    workers = tmp_path / "workers.yaml"
    workers.write_text(text.replace("version: 1\n", "version: 1\nrequests: {name: 'worker *'}\n"), encoding="utf-8")
    assert_one_line_error(
        run_cli("check", OTLP, "-b", workers), "no local root is a request under the 'requests' rules of"
    )


def test_file_without_spans_says_so(tmp_path: Path) -> None:
    """A well-formed file with no spans at all is exit 2: there is nothing to judge."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"resourceSpans": []}\n', encoding="utf-8")
    assert_one_line_error(run_cli("check", empty, "-b", BUDGETS), f"{empty}: no spans found")


# -- live Jaeger: failures a real Jaeger cannot be made to produce ---------------------------------
#
# The live path against the real Jaeger (query parameters, lookback, limit, its error answers)
# is tested in tests/e2e/test_check_live_jaeger.py. Here, local stand-ins for the two ways a
# query service can fail that a real one cannot be made to: never answering, and a body
# cut short.


def test_local_server_that_never_answers_times_out_with_one_line() -> None:
    """A server that accepts the connection and never answers: --timeout ends the wait, exit 2 with the URL."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # the kernel completes the connection; nothing ever reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        result = run_cli("check", "--jaeger", url, "--service", "s", "--timeout", "0.5", "-b", BUDGETS)
    assert_one_line_error(result, url, "Jaeger")
    # Which phase the deadline ends (the connection's socket timeout or the whole call's) depends on timing.
    assert "timed out" in result.stderr or "no complete answer from Jaeger within" in result.stderr


class _TruncatingJaeger(BaseHTTPRequestHandler):
    """Announces the search fixture's length, sends its first 100 bytes, and closes the connection."""

    def do_GET(self) -> None:
        body = JAEGER_SEARCH.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:100])
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


def test_local_server_whose_body_is_cut_short_is_one_line_exit_2() -> None:
    """A body shorter than its Content-Length is unusable input: exit 2, the URL and what broke, no traceback."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TruncatingJaeger)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = run_cli("check", "--jaeger", url, "--service", "support-assistant", "-b", BUDGETS)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert_one_line_error(
        result,
        f"{url}/api/traces?service=support-assistant",
        "Jaeger closed the connection in the middle of its answer",
    )
    assert "after 100 bytes" in result.stderr
