"""``report`` and ``check`` on the demo's saved traces: every lever, the models by stage, context size."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import DEMO_REQUESTS, REPO, run_cli

sys.path.insert(0, str(REPO / "benchmarks"))

import scaling  # type: ignore[import-not-found]
import workloads  # type: ignore[import-not-found]

EXAMPLE_BUDGETS = REPO / "budgets.example.yaml"
KINDS = ("streaming", "cache", "model_choice", "context_size", "output_length", "sequential_calls", "iterations")


@pytest.fixture(scope="module")
def report_json(demo_traces: Path) -> dict[str, Any]:
    """``report --format json`` of the demo's traces."""
    result = run_cli("report", demo_traces, "--budgets", EXAMPLE_BUDGETS, "--format", "json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_report_ranks_every_lever_with_figures(demo_traces: Path) -> None:
    """The text report's Where to win table has a row with figures for each lever, largest total first."""
    result = run_cli("report", demo_traces, "--budgets", EXAMPLE_BUDGETS)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Where to win, estimated over {DEMO_REQUESTS} requests" in out
    rows = re.findall(
        r"^(\w+) +\| (\w+) +\| +(\d+)% \((\d+)\) \| +([\d.]+)ms \| +([\d.]+)ms \| +([\d.,]+m?s) \|", out, re.M
    )
    assert {row[0] for row in rows} == set(KINDS)
    for kind in KINDS:
        assert re.search(rf"^\d\. {kind}, \w+: .+\. Based on .+\.$", out, re.M), kind
    assert "Model calls by stage and model" in out
    assert re.search(r"^model_call +\| gpt-4o +\| openai +\| +\d+ \|", out, re.M)
    assert re.search(r"^model_call +\| gpt-4o-mini +\| openai +\| +\d+ \|", out, re.M)
    assert re.search(
        r"^model_call +\| gpt-4o-mini +\| +\d+ \| +[\d,]+ \| .+\| [\d.]+ms per 1,000 tokens \(95% CI", out, re.M
    )


def test_the_json_levers_say_what_they_rest_on(report_json: dict[str, Any]) -> None:
    """Each lever in JSON has ordered savings, the stage and models involved, a basis and a thing to try."""
    levers = report_json["where_to_win"]
    assert {lever["kind"] for lever in levers} == set(KINDS)
    totals = [lever["savings_total_ms"] for lever in levers]
    assert totals == sorted(totals, reverse=True)
    for lever in levers:
        assert 0 < lever["requests"] < DEMO_REQUESTS
        assert lever["share"] == pytest.approx(lever["requests"] / DEMO_REQUESTS)
        assert 0 < lever["savings_p50_ms"] <= lever["savings_p95_ms"] <= lever["savings_total_ms"]
        assert lever["basis"]
        assert lever["try"]
        assert lever["saves"] == ("first_token" if lever["kind"] == "streaming" else "end_to_end")
    by_kind = {lever["kind"]: lever for lever in levers}
    assert by_kind["model_choice"]["targets"] == ["gpt-4o"]
    assert "gpt-4o-mini instead of gpt-4o" in by_kind["model_choice"]["try"]
    assert set(by_kind["streaming"]["targets"]) == {"gpt-4o", "gpt-4o-mini"}
    caches = {lever["stage"]: lever for lever in levers if lever["kind"] == "cache"}
    assert caches["retrieval"]["targets"] == ["support-kb"]  # a question asked before, the semantic cache missed
    assert "lookup_order" in caches["tool_calls"]["targets"]  # the same order looked up again in one request


def test_the_json_breaks_each_stage_down_by_model(report_json: dict[str, Any]) -> None:
    """Per stage and model: call counts that add up, ordered percentiles, first tokens of streamed calls."""
    models = {(row["stage"], row["model"]): row for row in report_json["models"]}
    assert set(models) == {
        ("retrieval", "text-embedding-3-small"),
        ("model_call", "gpt-4o"),
        ("model_call", "gpt-4o-mini"),
    }
    for row in models.values():
        assert row["providers"] == ["openai"]
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
    large, small = models["model_call", "gpt-4o"], models["model_call", "gpt-4o-mini"]
    assert large["p50_ms"] > small["p50_ms"]  # the larger model is slower
    assert large["ms_per_output_token"] > small["ms_per_output_token"]
    assert 0 < small["streamed"] < small["count"]  # planning calls and the legacy client do not stream
    assert small["first_token_p50_ms"] < small["p50_ms"]
    assert models["retrieval", "text-embedding-3-small"]["streamed"] == 0


def test_the_context_fit_is_shown_with_its_quality_or_not_at_all(report_json: dict[str, Any]) -> None:
    """Model calls get a first-token fit with an interval around the slope; embeddings, with no growth, get a reason."""
    rows = {(row["stage"], row["model"]): row for row in report_json["context_size"]}
    fit = rows["model_call", "gpt-4o-mini"]["first_token"]["fit"]
    assert fit is not None
    low, high = fit["ms_per_token_ci95"]
    assert 0 < low <= fit["ms_per_token"] <= high
    assert 0.05 <= fit["r_squared"] <= 1
    assert fit["n"] >= 10
    embeddings = rows["retrieval", "text-embedding-3-small"]
    assert embeddings["duration"]["fit"] is None
    assert embeddings["duration"]["reason"]
    assert embeddings["first_token"] == {"fit": None, "reason": "no streamed calls"}


def test_a_fit_over_more_calls_than_it_fits_says_it_was_thinned(tmp_path: Path) -> None:
    """2,000 calls of one model: the first-token fit rests on 400 of them, and the JSON, caption and test say so."""
    recording, budgets = tmp_path / "one-model.jsonl", tmp_path / "budgets.yaml"
    scaling.write_recording(scaling.WORKLOADS["one-model"], 8000, recording)  # 1,000 requests, two chat calls each
    budgets.write_text(workloads.BUDGETS, encoding="utf-8")
    result = run_cli("report", recording, "--budgets", budgets, "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    rows = {(row["stage"], row["model"]): row for row in data["context_size"]}
    fit = rows["model_call", "gpt-4o-mini"]["first_token"]["fit"]
    assert (fit["n"], fit["of"]) == (400, 2000)
    (lever,) = [lever for lever in data["where_to_win"] if lever["kind"] == "context_size"]
    assert "R² 1.00, n 400 (of 2,000, thinned evenly by size)" in lever["basis"]
    assert "over 400 calls (of 2,000, thinned evenly by size)" in lever["test"]
    again = run_cli("report", recording, "--budgets", budgets, "--format", "json")
    assert json.loads(again.stdout)["context_size"] == data["context_size"]  # the sample is the same each run


def test_markdown_and_check_carry_the_levers_too(demo_traces: Path) -> None:
    """The Markdown report and `check` (text and JSON) show the ranked levers."""
    markdown = run_cli("report", demo_traces, "--budgets", EXAMPLE_BUDGETS, "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert f"**Where to win, estimated over {DEMO_REQUESTS} requests" in markdown.stdout
    assert re.search(r"^\| `streaming` \| `model_call` \| +\d+% \(\d+\) \|", markdown.stdout, re.M)
    check = run_cli("check", demo_traces, "--budgets", EXAMPLE_BUDGETS)
    assert check.returncode in (0, 1), check.stderr
    assert f"Where to win, estimated over {DEMO_REQUESTS} requests" in check.stdout
    data = json.loads(run_cli("check", demo_traces, "--budgets", EXAMPLE_BUDGETS, "--format", "json").stdout)
    assert {lever["kind"] for lever in data["where_to_win"]} == set(KINDS)
