"""Plurals right where a count of one meets a noun: the levers' basis texts and every report format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from latency_budget._core.wording import plural
from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget.cli import main

from .lever_traffic import Traffic
from .test_lever_hints import chat
from .test_lever_protected import BUDGETS, GUARDRAIL

ONE_PLURAL = re.compile(r"\b1 (calls|requests|spans|traces|tools|models|findings|checks|runs|stages)\b")
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order", "gen_ai.tool.call.arguments": "7"}


def test_plural_says_one_noun_and_many_nouns() -> None:
    """1 call, 0 calls, 2 calls; an irregular plural where given."""
    assert [plural(n, "call") for n in (0, 1, 2)] == ["0 calls", "1 call", "2 calls"]
    assert plural(1, "query", "queries") == "1 query"
    assert plural(3, "query", "queries") == "3 queries"
    assert plural(100_000, "span", grouped=True) == "100,000 spans"


def _traffic() -> Traffic:
    """Three streamed calls, then one request each: an answer held back by its guardrail, one identical repeat."""
    t = Traffic(BUDGETS)
    for _ in range(3):
        t.send(("chat m", 1000, chat("m", stream=True, ttft_s=0.25)))
    t.send(("chat m", 1500, chat("m", stream=False)), ("guardrail output", 100, GUARDRAIL))
    t.send(("tool a", 100, TOOL), ("tool b", 100, TOOL))
    return t


def test_no_count_of_one_takes_a_plural_noun_in_any_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """report (table, json, markdown, HTML) and check (table, json, markdown): "1 call", never "1 calls"."""
    t = _traffic()
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(encode_otlp_json(t.p.finished())) + "\n", encoding="utf-8")
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    html = tmp_path / "report.html"
    outputs: dict[str, str] = {}
    capsys.readouterr()
    for command in ("report", "check"):
        for form in ("table", "json", "markdown"):
            extra = ["--html", str(html)] if command == "report" and form == "table" else []
            main([command, str(traces), "--budgets", str(budgets), "--format", form, *extra])
            outputs[f"{command} {form}"] = capsys.readouterr().out
    outputs["report html"] = html.read_text(encoding="utf-8")
    # The counts of one are there to be said: the repeat and the held-back request.
    assert "1 call identical to an earlier one" in outputs["report json"]
    assert "no saving claimed in 1 request:" in outputs["report json"]
    assert {name: ONE_PLURAL.findall(text) for name, text in outputs.items()} == {name: [] for name in outputs}
