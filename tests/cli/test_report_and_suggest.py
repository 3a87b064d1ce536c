"""``latency-budget report`` and ``latency-budget suggest`` on the recorded fixtures."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest
import yaml

from latency_budget._config import load_budgets

from .conftest import BUDGETS, JAEGER_SEARCH, OTLP, expected_reports, run_cli


def _p(values: list[float], q: int) -> float:
    """Oracle: the standard library's inclusive (linear) percentile."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def test_report_table_has_percentiles_counts_and_violations() -> None:
    """Per stage: n, p50, p95, p99 and the violation count and rate; then end-to-end percentiles."""
    result = run_cli("report", OTLP, "--budgets", BUDGETS)
    assert result.returncode == 0, result.stderr
    default = [r for r in expected_reports() if r["profile"] == "default"]
    calls = [r["stages"]["model_call"]["actual_ms"] for r in default if "model_call" in r["stages"]]
    broke = sum(1 for r in default if any(v.startswith("model_call:") for v in r["violations"]))
    row = next(line for line in result.stdout.splitlines() if line.startswith("default | model_call  "))
    cells = [cell.strip() for cell in row.split("|")]
    assert cells[3] == str(len(calls))
    assert cells[4:7] == [f"{_p(calls, q):.1f}".rstrip("0").rstrip(".") + "ms" for q in (50, 95, 99)]
    assert cells[7] == f"{100 * broke / len(calls):.1f}% ({broke}/{len(calls)})"
    assert re.search(r"^End to end over 30 requests: p50 [\d.]+ms, p95 [\d.]+ms, p99 [\d.]+ms", result.stdout, re.M)


def test_report_json_end_to_end_and_counts_match_the_processor() -> None:
    """--format json: end-to-end percentiles over all requests, and per-row counts, from the processor's figures."""
    payload = json.loads(run_cli("report", OTLP, "-b", BUDGETS, "--format", "json").stdout)
    totals = [r["total_actual_ms"] for r in expected_reports()]
    assert payload["requests"] == len(totals)
    assert payload["violated_requests"] == sum(r["violated"] for r in expected_reports())
    for q in (50, 95, 99):
        assert payload["end_to_end"][f"p{q}_ms"] == pytest.approx(_p(totals, q))
    row = next(r for r in payload["rows"] if (r["profile"], r["stage"], r["metric"]) == ("voice", "total", "duration"))
    assert row["count"] == sum(1 for r in expected_reports() if r["profile"] == "voice")


def test_report_without_budgets_uses_the_builtin_genai_stages() -> None:
    """Without --budgets, the four built-in stages are found by the GenAI matchers (no validation here), unbudgeted."""
    result = run_cli("report", JAEGER_SEARCH)
    assert result.returncode == 0, result.stderr
    stages = [line.split("|")[0].strip() for line in result.stdout.splitlines()[4:10]]
    assert stages == ["retrieval", "model_call", "tool_calls", "validation", "total", "first token"]
    assert "No budgets set" in result.stdout


def test_report_reads_standard_input() -> None:
    """`-` reads the traces from standard input, named <stdin> in the output."""
    result = run_cli("report", "-", "-b", BUDGETS, stdin=OTLP.read_text(encoding="utf-8"))
    assert result.returncode == 0, result.stderr
    assert "30 requests (30 traces, 312 spans) from <stdin>" in result.stdout


def test_report_markdown() -> None:
    """--format markdown is a heading, the table and the end-to-end line."""
    result = run_cli("report", OTLP, "-b", BUDGETS, "-f", "markdown")
    assert result.stdout.startswith("### Latency by stage\n")
    assert "| default | `model_call` | 3500ms |" in result.stdout


def _stage_budgets(document: dict[str, object]) -> dict[str, float]:
    stages = document["stages"]
    assert isinstance(stages, dict)
    return {name: spec["budget_ms"] for name, spec in stages.items() if spec and "budget_ms" in spec}


def test_suggest_writes_valid_budgets_from_the_percentile_times_headroom(tmp_path: Path) -> None:
    """Each budget is ceil(p95 x 1.2) of what was observed, the file validates, and a comment shows the numbers."""
    result = run_cli("suggest", OTLP, "--budgets", BUDGETS)
    assert result.returncode == 0, result.stderr
    suggested = tmp_path / "suggested.yaml"
    suggested.write_text(result.stdout, encoding="utf-8")
    validate = run_cli("validate", suggested)
    assert validate.returncode == 0, validate.stderr
    document = yaml.safe_load(result.stdout)
    default = [r for r in expected_reports() if r["profile"] == "default"]
    for stage, budget in _stage_budgets(document).items():
        actuals = [r["stages"][stage]["actual_ms"] for r in default if stage in r["stages"]]
        assert budget == math.ceil(round(_p(actuals, 95) * 1.2, 6)), stage
    assert document["total_ms"] == math.ceil(round(_p([r["total_actual_ms"] for r in default], 95) * 1.2, 6))
    comment = re.search(r"^  model_call:\n    # (.*)\n    budget_ms: \d+$", result.stdout, re.M)
    assert comment is not None
    assert re.fullmatch(
        r"observed in \d+ of 22 requests: p50 [\d.]+ms, p95 [\d.]+ms, p99 [\d.]+ms, max .* x 1\.2", comment.group(1)
    )


def test_suggest_carries_over_match_rules_severities_and_profiles() -> None:
    """Custom stages keep match rules, severities and call limits; profiles keep `when` and get their own numbers."""
    text = run_cli("suggest", OTLP, "-b", BUDGETS).stdout
    document = yaml.safe_load(text)
    original = yaml.safe_load(BUDGETS.read_text(encoding="utf-8"))
    for name in ("guardrails", "cache"):
        assert document["stages"][name]["match"] == original["stages"][name]["match"]
        assert document["stages"][name]["severity"] == "warn"
    assert document["stages"]["model_call"]["max_calls"] == 4
    (voice,) = document["profiles"]
    assert voice["name"] == "voice"
    assert voice["when"] == original["profiles"][0]["when"]
    voice_reports = [r for r in expected_reports() if r["profile"] == "voice"]
    assert voice["total_ms"] == math.ceil(round(_p([r["total_actual_ms"] for r in voice_reports], 95) * 1.2, 6))
    assert load_budgets(text=text).stage_names == load_budgets(BUDGETS).stage_names


def test_suggest_carries_over_objectives(tmp_path: Path) -> None:
    """Objectives are policy, not measurement: the suggested file keeps each one, top-level, per stage, per profile."""
    text = BUDGETS.read_text(encoding="utf-8")
    text = text.replace("version: 1\n", "version: 1\nobjective: 99%\ntotal_objective: 99.5%\n", 1)
    text = text.replace("  model_call:\n", "  model_call:\n    objective: 95%\n", 1)
    text += "    first_token_objective: 99.9%\n"  # the file ends inside its one profile, the voice one
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(text, encoding="utf-8")
    original = load_budgets(budgets)
    assert original.budgets_by_profile("voice").first_token_objective == 0.999
    result = run_cli("suggest", OTLP, "-b", budgets)
    assert result.returncode == 0, result.stderr
    suggested = load_budgets(text=result.stdout)
    for profile in ("default", "voice"):
        before, after = original.budgets_by_profile(profile), suggested.budgets_by_profile(profile)
        assert [s.objective for s in after.stages] == [s.objective for s in before.stages]
        assert (after.total_objective, after.first_token_objective) == (
            before.total_objective,
            before.first_token_objective,
        )


def test_suggest_carries_over_requests_and_hint_settings(tmp_path: Path) -> None:
    """`requests` rules and `hints` (top level and per profile) reach the suggested file, which loads with them."""
    text = BUDGETS.read_text(encoding="utf-8").replace(
        "version: 1\n", "version: 1\nrequests: [{kind: server}]\nhints: {min_saving_ms: 20}\n"
    )
    text = text.replace("  - name: voice\n", "  - name: voice\n    hints: {min_saving_ms: 50}\n")
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(text, encoding="utf-8")
    config = load_budgets(text=run_cli("suggest", OTLP, "-b", budgets).stdout)
    assert config.requests == load_budgets(budgets).requests
    assert [config.budgets_by_profile(name).min_saving_ms for name in ("default", "voice")] == [20.0, 50.0]


def test_suggest_flags_and_output_file(tmp_path: Path) -> None:
    """--percentile p99 --headroom 1.5 -o FILE writes budgets of ceil(p99 x 1.5) with the built-in stages."""
    out = tmp_path / "budgets.yaml"
    result = run_cli("suggest", JAEGER_SEARCH, "--percentile", "p99", "--headroom", "1.5", "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert f"Wrote {out}." in result.stderr
    document = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert sorted(document["stages"]) == ["model_call", "retrieval", "tool_calls", "validation"]
    retrieval = [r["stages"]["retrieval"]["actual_ms"] for r in expected_reports()]
    # Jaeger's microsecond rounding may move the product across a whole millisecond, by at most one.
    assert abs(document["stages"]["retrieval"]["budget_ms"] - math.ceil(_p(retrieval, 99) * 1.5)) <= 1
    assert run_cli("validate", out).returncode == 0


@pytest.mark.parametrize("headroom", ["0", "-1", "lots"])
def test_suggest_rejects_a_bad_headroom(headroom: str) -> None:
    """A headroom that is not a positive number is a one-line usage error."""
    result = run_cli("suggest", OTLP, "--headroom", headroom)
    assert result.returncode == 2
    assert "--headroom" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["report", "check"])
def test_report_and_check_say_where_to_optimise(command: str) -> None:
    """`report` and `check` print the critical-path share per stage and the ranked levers, also in JSON."""
    table = run_cli(command, OTLP, "--budgets", BUDGETS)
    assert table.returncode in (0, 1), table.stderr
    share = re.search(r"^Critical path \(share of end-to-end time\): (.+)\.$", table.stdout, re.M)
    assert share is not None, table.stdout
    percents = [int(part.rsplit(" ", 1)[1].rstrip("%")) for part in share.group(1).split(", ")]
    assert 97 <= sum(percents) <= 103  # rounded shares of a partition of the end-to-end time
    assert "Where to win, estimated over 30 requests" in table.stdout
    assert re.search(r"^sequential_calls \| tool_calls \| +\d+% \(\d+\) \|", table.stdout, re.M)
    assert re.search(
        r"^\d\. sequential_calls, tool_calls: Run independent tool_calls spans concurrently", table.stdout, re.M
    )
    data = json.loads(run_cli(command, OTLP, "--budgets", BUDGETS, "--format", "json").stdout)
    assert math.isclose(sum(data["critical_path_share"].values()), 1.0, rel_tol=1e-9)
    assert data["hints"], "the demo's recorded traces contain sequential tool calls"
    levers = {(lever["kind"], lever["stage"]): lever for lever in data["where_to_win"]}
    sequential = levers["sequential_calls", "tool_calls"]
    assert sequential["requests"] == next(h["requests"] for h in data["hints"] if h["kind"] == "sequential_calls")
    assert 0 < sequential["savings_p50_ms"] <= sequential["savings_p95_ms"] <= sequential["savings_total_ms"]
