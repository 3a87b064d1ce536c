"""A stage's match adds to the built-in rules (builtin: false replaces them); every config problem at once."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

from latency_budget import BudgetConfigError, load_budgets
from latency_budget._config.genai_defaults import builtin_rules
from latency_budget.cli import main

from .helpers import op, pipeline

EXTENDED = """
version: 1
stages:
  retrieval:
    budget_ms: 100
    match: {name: "kb.lookup"}
  model_call: {budget_ms: 800}
"""


def _stage_of(yaml_text: str, name: str, attributes: dict[str, str]) -> object:
    """The stage label a live processor gives a span named ``name`` with ``attributes`` under a request."""
    p = pipeline(yaml_text)
    root = p.start("POST /ask", 0)
    p.run(name, 1, 5, parent=root, attributes=attributes)
    root.end()
    return (p.span(name).attributes or {}).get("latency_budget.stage")


def test_a_match_adds_to_the_built_in_rules() -> None:
    """Adding one span name to retrieval keeps the built-in retrieval rules (a GenAI embeddings call)."""
    assert _stage_of(EXTENDED, "kb.lookup", {}) == "retrieval"
    assert _stage_of(EXTENDED, "embeddings text-embedding-3", op("embeddings")) == "retrieval"


def test_builtin_false_replaces_the_built_in_rules() -> None:
    """builtin: false on the stage keeps only its own rules."""
    replaced = EXTENDED.replace('match: {name: "kb.lookup"}', 'match: {name: "kb.lookup"}\n    builtin: false')
    assert _stage_of(replaced, "kb.lookup", {}) == "retrieval"
    assert _stage_of(replaced, "embeddings text-embedding-3", op("embeddings")) is None


def test_the_stage_s_own_rules_come_first_then_the_built_in_ones() -> None:
    """A stage with a match holds its own rules, then every built-in rule of its name."""
    config = load_budgets(text=EXTENDED)
    retrieval = config.stages[config.stage_index["retrieval"]]
    assert retrieval.rules[1:] == builtin_rules("retrieval")
    assert retrieval.builtin is True


def test_builtin_on_a_stage_of_no_built_in_rules_names_the_closest() -> None:
    """builtin: true on a custom stage is an error naming file, line, key and the closest built-in stage."""
    text = "version: 1\nstages:\n  retreival:\n    builtin: true\n    match: {name: x}\n"
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text=text, source="b.yaml")
    assert (
        str(caught.value)
        == "b.yaml:4: stages.retreival.builtin: 'retreival' has no built-in rules; did you mean 'retrieval'?"
    )


def test_builtin_false_without_match_is_an_error() -> None:
    """builtin: false with no match would leave the stage no rules."""
    with pytest.raises(
        BudgetConfigError, match=r"b.yaml:4: stages.model_call.builtin: false leaves the stage no rules"
    ):
        load_budgets(text="version: 1\nstages:\n  model_call:\n    builtin: false\n", source="b.yaml")


def test_a_misspelt_stage_without_match_gets_did_you_mean() -> None:
    """A stage named like a built-in one but misspelt, with no match, is told the name it was probably meant to be."""
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text="version: 1\nstages:\n  model_cal: {budget_ms: 5}\n", source="b.yaml")
    assert str(caught.value).endswith("did you mean 'model_call'?")
    assert caught.value.line == 3


def test_every_problem_is_reported_at_once_in_file_order() -> None:
    """Several problems in one file are all reported, each with its file, line and key path."""
    text = """version: 1
stages:
  retrieval: {budget_ms: "800ms"}
  model_call:
    budget_ms: 800
    severty: warn
  tool_calls: {budget_ms: -1}
profiles:
  - name: enterprise
    when: {attributes: {tier: enterprise}}
    stages:
      model_cal: {budget_ms: 900}
"""
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text=text, source="b.yaml")
    error = caught.value
    assert [(p.line, p.path) for p in error.problems] == [
        (3, "stages.retrieval.budget_ms"),
        (6, "stages.model_call.severty"),
        (7, "stages.tool_calls.budget_ms"),
        (12, "profiles[0].stages.model_cal"),
    ]
    assert error.lines == tuple(str(p) for p in error.problems)
    assert error.lines[1] == "b.yaml:6: stages.model_call.severty: unknown key; did you mean 'severity'?"
    assert error.lines[3].endswith("did you mean 'model_call'?")
    assert (error.line, error.path) == (3, "stages.retrieval.budget_ms")  # the first problem, as before


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("version: 1\nstages:\n  retrieval: {builtin: false, match: {name: x}}\n", True),
        ("version: 1\nstages:\n  retrieval: {builtin: true, match: {name: x}}\n", True),
        ("version: 1\nstages:\n  retrieval: {builtin: false}\n", False),
        ("version: 1\nstages:\n  mine: {builtin: false, match: {name: x}}\n", False),
    ],
)
def test_schema_agrees_with_the_loader_on_builtin(text: str, valid: bool) -> None:
    """budgets.schema.json accepts and refuses builtin exactly where the loader does."""
    schema = json.loads(resources.files("latency_budget._config").joinpath("budgets.schema.json").read_text("utf-8"))
    assert jsonschema.Draft202012Validator(schema).is_valid(yaml.safe_load(text)) is valid
    if valid:
        load_budgets(text=text)
    else:
        with pytest.raises(BudgetConfigError, match="builtin"):
            load_budgets(text=text)


def test_validate_prints_one_line_per_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """latency-budget validate lists every problem, one line each, and exits 1."""
    path = tmp_path / "b.yaml"
    path.write_text("version: 1\nstages:\n  retrieval: {budget_ms: '800ms'}\n  model_cal: {budget_ms: 5}\n", "utf-8")
    assert main(["validate", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"latency-budget: {path}:3: stages.retrieval.budget_ms: expected a positive number, got '800ms'",
        f"latency-budget: {path}:4: stages.model_cal: no 'match' rules; only the built-in stages (retrieval,"
        " model_call, tool_calls, validation) may omit them; did you mean 'model_call'?",
    ]
