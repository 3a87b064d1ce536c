"""Objectives in the budget file: where they may be written, what each budget inherits, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from latency_budget import BudgetConfigError, load_budgets

REPO = Path(__file__).resolve().parents[2]

FULL = """\
version: 1
objective: 99%
total_ms: 5000
first_token_ms: 2000
total_objective: 99.5%
stages:
  retrieval: {budget_ms: 300}
  model_call: {budget_ms: 3000, objective: 95%}
  tool_calls: {budget_ms: 800}
profiles:
  - name: voice
    when: {name: voice}
    first_token_objective: 99.9%
    stages:
      retrieval: {objective: 90%}
  - name: batch
    when: {name: batch}
    total_objective: 80%
"""


def error_of(text: str) -> str:
    """The message load_budgets raises for ``text`` (named budgets.yaml)."""
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text=text, source="budgets.yaml")
    return str(caught.value)


def test_top_level_objective_is_the_default_of_every_budget() -> None:
    """`objective` at the top applies to each stage and to total_ms and first_token_ms unless they name their own."""
    default = load_budgets(text=FULL).default
    assert [(s.name, s.objective) for s in default.stages] == [
        ("retrieval", 0.99),
        ("model_call", 0.95),
        ("tool_calls", 0.99),
    ]
    assert (default.total_objective, default.first_token_objective) == (0.995, 0.99)


def test_profiles_inherit_objectives_and_override_what_they_name() -> None:
    """A profile keeps the top-level objectives except a stage override's and its own total/first-token ones."""
    config = load_budgets(text=FULL)
    voice, batch = (config.budgets_by_profile(name) for name in ("voice", "batch"))
    assert [s.objective for s in voice.stages] == [0.9, 0.95, 0.99]
    assert (voice.total_objective, voice.first_token_objective) == (0.995, 0.999)
    assert [s.objective for s in batch.stages] == [0.99, 0.95, 0.99]
    assert (batch.total_objective, batch.first_token_objective) == (0.8, 0.99)


def test_no_objective_anywhere_leaves_every_budget_without_one() -> None:
    """Objectives are optional: a file without any has none, and judges exactly as before."""
    default = load_budgets(text="version: 1\ntotal_ms: 10\nstages: {model_call: {budget_ms: 5}}\n").default
    assert default.stage("model_call").objective is None
    assert (default.total_objective, default.first_token_objective) == (None, None)


@pytest.mark.parametrize(
    ("text", "fraction"),
    [("99%", 0.99), ("99.9%", 0.999), ("0.5%", 0.005), ("99.999999%", 0.99999999), ("50.0%", 0.5), ("1%", 0.01)],
)
def test_objective_percentages_become_exact_fractions(text: str, fraction: float) -> None:
    """A percentage is read as the nearest float to its exact decimal fraction (99.9% is 0.999, not 0.9990000001)."""
    assert load_budgets(text=f"version: 1\nobjective: '{text}'\n").default.total_objective == fraction


@pytest.mark.parametrize("value", ["100%", "0%", "0.0%", "99", "99.%", "05%", "99.1234567%", "99 %", "-1%"])
def test_objectives_outside_0_to_100_percent_are_rejected(value: str) -> None:
    """0%, 100% and anything not written as a percentage with at most 6 decimals is an error naming file, line, key."""
    message = error_of(f"version: 1\nstages:\n  model_call:\n    budget_ms: 5\n    objective: '{value}'\n")
    assert message == (
        "budgets.yaml:5: stages.model_call.objective: expected a percentage above 0% and below 100% "
        f"(at most 6 decimals) such as '99%' or '99.9%', got {value!r}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 1\nobjective: 0.99\n", "budgets.yaml:2: objective: expected a percentage"),
        ("version: 1\ntotal_objective: 99\n", "budgets.yaml:2: total_objective: expected a percentage"),
        (
            "version: 1\nprofiles:\n  - name: p\n    when: {name: x}\n    first_token_objective: high\n",
            "budgets.yaml:5: profiles[0].first_token_objective: expected a percentage",
        ),
        (
            "version: 1\nstages: {model_call: {budget_ms: 5}}\nprofiles:\n  - name: p\n    when: {name: x}\n"
            "    stages: {model_call: {objective: 1}}\n",
            "budgets.yaml:6: profiles[0].stages.model_call.objective: expected a percentage",
        ),
        (
            "version: 1\nprofiles:\n  - name: p\n    when: {name: x}\n    objective: 99%\n",
            "budgets.yaml:5: profiles[0].objective: unknown key; did you mean 'total_objective'?",
        ),
        ("version: 1\nobjectiv: 99%\n", "budgets.yaml:2: objectiv: unknown key; did you mean 'objective'?"),
    ],
)
def test_objective_errors_name_file_line_and_key(text: str, message: str) -> None:
    """Each misplaced or malformed objective key is reported at its own line and key path."""
    assert error_of(text).startswith(message)


def test_the_alerting_page_objective_example_loads_as_it_says() -> None:
    """docs/alerting.md's objective example loads with the default, a stage's own and the profile's overrides."""
    readme = (REPO / "docs" / "alerting.md").read_text(encoding="utf-8").split("# Alerting on budgets", 1)[1]
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = load_budgets(text=example, source="docs/alerting.md")
    default, voice = config.default, config.budgets_by_profile("voice")
    assert (default.stage("model_call").objective, default.stage("guardrails").objective) == (0.99, 0.95)
    assert (default.total_objective, default.first_token_objective) == (0.995, 0.99)
    assert (voice.stage("model_call").objective, voice.first_token_objective) == (0.999, 0.995)
