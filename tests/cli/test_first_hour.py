"""From the demo to your own app: the demo's recording keeps its budgets, the demo says what to run next, init."""

from __future__ import annotations

import json
from pathlib import Path

from latency_budget import load_budgets
from latency_budget._demo import example_budgets_text
from latency_budget.export.file import encode_otlp_json

from .conftest import OTLP, assert_one_line_error, run_cli
from .test_doctor import BUDGETS as DOCTOR_BUDGETS
from .test_doctor import _recorded as doctor_spans


def test_report_and_check_on_the_demo_recording_use_the_demo_budgets_and_say_so(
    demo_traces: Path, tmp_path: Path
) -> None:
    """Without -b, report and check judge a demo recording by the demo's budgets, as -b budgets.example.yaml does."""
    example = tmp_path / "budgets.example.yaml"
    example.write_text(example_budgets_text(), encoding="utf-8")
    for command in ("report", "check"):
        implicit = run_cli(command, demo_traces, "--format", "json")
        explicit = run_cli(command, demo_traces, "--format", "json", "-b", example)
        assert implicit.returncode == explicit.returncode, implicit.stderr
        got, want = json.loads(implicit.stdout), json.loads(explicit.stdout)
        assert got["budgets"].startswith("budgets.example.yaml, the demo's budgets")
        assert got["violated_requests"] == want["violated_requests"] > 0
    table = run_cli("report", demo_traces)
    assert "budgets from budgets.example.yaml, the demo's budgets" in table.stdout.splitlines()[0]


def test_check_without_budgets_on_another_recording_says_how_to_get_one() -> None:
    """check on a recording that is not the demo's, without -b, is one line pointing at init (exit 2)."""
    assert_one_line_error(run_cli("check", OTLP), "--budgets FILE is needed", "latency-budget init")


def test_demo_ends_with_the_next_commands(demo_traces: Path, tmp_path: Path) -> None:
    """The demo's last lines name its recording (shell-quoted), init, how to record and check."""
    saved = tmp_path / "my demo.jsonl"
    result = run_cli("demo", "-n", "5", "--show", "0", "--save-traces", saved)
    assert result.returncode == 0, result.stderr
    tail = result.stdout.rstrip().splitlines()[-6:]
    assert tail[0].startswith("Next:")
    assert f"latency-budget report '{saved}' --html report.html" in tail[1]
    assert "latency-budget init" in tail[2]
    assert "OTEL_LATENCY_BUDGET_TRACES_FILE=traces.jsonl" in tail[3]
    assert "latency-budget check traces.jsonl -b budgets.yaml" in tail[5]


def test_init_writes_a_commented_file_that_validates_and_keeps_an_existing_one(tmp_path: Path) -> None:
    """init writes budgets.yaml with comments, which validate accepts; a second init leaves it alone (exit 2)."""
    first = run_cli("init", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    written = (tmp_path / "budgets.yaml").read_text(encoding="utf-8")
    assert written.startswith("# Latency budgets for your AI requests")
    assert "builtin: false" in written  # the comment on match adding to the built-in rules
    assert [s.name for s in load_budgets(tmp_path / "budgets.yaml").stages] == ["retrieval", "model_call", "tool_calls"]
    assert run_cli("validate", "budgets.yaml", cwd=tmp_path).returncode == 0
    (tmp_path / "budgets.yaml").write_text("version: 1\n", encoding="utf-8")
    assert_one_line_error(run_cli("init", cwd=tmp_path), "budgets.yaml exists", "--force")
    assert (tmp_path / "budgets.yaml").read_text(encoding="utf-8") == "version: 1\n"


def test_init_from_a_recording_drafts_as_suggest_does(demo_traces: Path, tmp_path: Path) -> None:
    """init --from drafts the file suggest would, from the demo's recording with the demo's stages and rules."""
    out = tmp_path / "drafted.yaml"
    result = run_cli("init", "--from", demo_traces, "-o", out)
    assert result.returncode == 0, result.stderr
    suggested = run_cli("suggest", demo_traces)
    assert suggested.returncode == 0, suggested.stderr
    assert out.read_text(encoding="utf-8") == suggested.stdout
    config = load_budgets(out)
    assert "guardrails" in config.stage_names  # the demo's own stages, with their match rules carried over
    check = run_cli("check", demo_traces, "-b", out, "--format", "json")
    assert json.loads(check.stdout)["requests"] > 0


def test_doctor_fix_for_a_span_in_no_stage_is_the_one_rule_to_add(tmp_path: Path) -> None:
    """doctor's fix for AI spans in no stage is the rule to add, not the built-in rules written out first."""
    traces, budgets = tmp_path / "t.jsonl", tmp_path / "b.yaml"
    traces.write_text(json.dumps(encode_otlp_json(doctor_spans())) + "\n", encoding="utf-8")
    budgets.write_text(DOCTOR_BUDGETS, encoding="utf-8")
    result = run_cli("doctor", traces, "-b", budgets, "--format", "json")
    assert result.returncode == 1, result.stderr
    fix = json.loads(result.stdout)["fix"]["stages"]
    assert fix["retrieval"] == {"match": [{"attributes": {"acme.component.type": ["BM25Retriever"]}}]}
    assert fix["model_call"]["match"] == [{"attributes": {"acme.component.type": ["OpenAIChatGenerator"]}}]
    assert fix["tool_calls"]["builtin"] is False  # a veto on the built-in rules writes them out, and says so
