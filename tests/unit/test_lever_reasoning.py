"""The reasoning lever: what reasoning tokens above the model's usual cost, with the null controls.

Planted traffic: 63 non-streamed calls of model m whose duration is 200 ms + 2 ms per output
token, each output of r reasoning tokens (200 to 1,000; median 600) and 100 to 300 answer
tokens. Then a call of 1,600 reasoning and 200 answer tokens, 3,800 ms: cut to the median
600, its reasoning would take 2 x 1,000 = 2,000 ms less. Through the processor (its hint
events) and ``report`` (its Where to win); the null controls are the same traffic without a
reasoning attribute, and a last call at the median.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget._config.model import DEFAULT_QUALITY
from latency_budget._core.call_facts import call_of
from latency_budget._core.levers import LEVERS, RecordedBaseline
from latency_budget._core.levers.reasoning import find
from latency_budget._core.recent import WINDOW

from .lever_traffic import Traffic, levers
from .test_lever_hints import chat

BUDGETS = """
version: 1
stages:
  model_call: {budget_ms: 100000}
"""


def _tokens(thought: int, answer: int, spelling: str | None) -> dict[str, AttributeValue]:
    found: dict[str, AttributeValue] = {"gen_ai.usage.output_tokens": thought + answer}
    if spelling is not None:
        found[spelling] = thought
    return found


def _traffic(
    last_thought: int = 1600, *, spelling: str | None = "gen_ai.usage.reasoning.output_tokens", budgets: str = BUDGETS
) -> Traffic:
    t = Traffic(budgets)
    for n in range(WINDOW - 1):  # fits are tested once a window is full
        thought, answer = 200 * (1 + n % 5), 100 * (1 + n % 3)
        t.send(("chat m", 200 + 2 * (thought + answer), chat("m", stream=False, **_tokens(thought, answer, spelling))))
    last = chat("m", stream=False, **_tokens(last_thought, 200, spelling))
    t.send(("chat m", 200 + 2 * (last_thought + 200), last))
    return t


def test_reasoning_above_the_median_is_costed_at_the_models_time_per_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,000 reasoning tokens above the median at 2 ms each: a 2,000 ms hint, and report's share and advice."""
    t = _traffic()
    (hint,) = t.hints("reasoning")
    assert hint[attr.HINT_SAVINGS_MS] == 2000.0
    assert hint[attr.HINT_SPAN_COUNT] == 1
    (row,) = levers(t.report(tmp_path, capsys), "reasoning")
    assert "2ms per output token of m" in row["basis"]
    assert "reasoning tokens took about" in row["basis"]
    assert "lower reasoning level" in row["try"]


def test_no_reasoning_hint_without_reasoning_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Null control: the same traffic with no reasoning attribute gives no reasoning finding (output length may)."""
    t = _traffic(spelling=None)
    assert t.hints("reasoning") == []
    assert levers(t.report(tmp_path, capsys), "reasoning") == []


def test_no_reasoning_hint_at_the_usual_amount_of_reasoning() -> None:
    """Null control: a last call with the median 600 reasoning tokens saves nothing."""
    assert _traffic(600).hints("reasoning") == []


def test_no_reasoning_hint_in_a_protected_stage() -> None:
    """The same traffic with model_call marked protected: its calls' reasoning is never shortened."""
    protected = BUDGETS.replace("{budget_ms: 100000}", "{budget_ms: 100000, protected: true}")
    assert _traffic(budgets=protected).hints("reasoning") == []


@pytest.mark.parametrize(
    "spelling",
    ["gen_ai.usage.reasoning_tokens", "llm.token_count.completion_details.reasoning"],
    ids=["OpenLLMetry", "OpenInference"],
)
def test_the_lever_reads_reasoning_in_the_other_dialects_spellings(spelling: str) -> None:
    """The finder on a recording: OpenLLMetry's and OpenInference's reasoning counts give the same 2,000 ms."""
    calls = []
    for n in range(WINDOW - 1):
        thought, answer = 200 * (1 + n % 5), 100 * (1 + n % 3)
        duration = int((200 + 2 * (thought + answer)) * 1e6)
        attributes = chat("m", stream=False, **_tokens(thought, answer, spelling))
        calls.append(call_of(n, "model_call", n * 10**10, n * 10**10 + duration, None, attributes))
    last = chat("m", stream=False, **_tokens(1600, 200, spelling), **{"gen_ai.request.reasoning.level": "high"})
    calls.append(call_of(99, "model_call", 10**15, 10**15 + 3_800_000_000, None, last))
    assert calls[-1].reasoning_level == "high"
    found = find("model_call", [calls[-1]], RecordedBaseline(calls), 100_000.0, {}, DEFAULT_QUALITY)
    assert found is not None
    assert found.saving_ms == pytest.approx(2000.0)


def test_the_lever_says_it_needs_evaluation_scores() -> None:
    """Less reasoning can change answers: the lever names evaluation scores as the evidence it needs."""
    assert "evaluation_scores" in LEVERS["reasoning"].needs
