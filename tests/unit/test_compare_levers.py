"""compare's predicted against measured: each lever kind has a rule that sees it applied, none in the same traffic."""

from __future__ import annotations

from collections import Counter

import pytest

from latency_budget._core.kinds import HINT_KINDS, HintKind
from latency_budget.cli._applied import _Facts, _shows

# What one stage's calls show before a lever, and after it is applied: (before, after).
APPLIED: dict[HintKind, tuple[_Facts, _Facts]] = {
    "streaming": (_Facts(answers=100, streamed=60), _Facts(answers=100, streamed=100)),
    "model_choice": (
        _Facts(models=Counter({"gpt-4o": 40, "gpt-4o-mini": 60})),
        _Facts(models=Counter({"gpt-4o": 5, "gpt-4o-mini": 95})),
    ),
    "cache": (_Facts(keyed=100, repeats=30), _Facts(keyed=100, repeats=2)),
    "context_size": (_Facts(input_tokens=[3000] * 50), _Facts(input_tokens=[1800] * 50)),
    "output_length": (_Facts(output_tokens=[400] * 50), _Facts(output_tokens=[200] * 50)),
    "reasoning": (_Facts(reasoning_tokens=[1200] * 50), _Facts(reasoning_tokens=[300] * 50)),
    "sequential_calls": (
        _Facts(requests=100, hinted=Counter({"sequential_calls": 30})),
        _Facts(requests=100, hinted=Counter({"sequential_calls": 3})),
    ),
    "iterations": (
        _Facts(requests=100, hinted=Counter({"iterations": 20})),
        _Facts(requests=100, hinted=Counter({"iterations": 1})),
    ),
}


def test_every_lever_kind_has_an_applied_case() -> None:
    """The table above covers every lever kind (a new kind must say how compare sees it applied)."""
    assert set(APPLIED) == set(HINT_KINDS)


@pytest.mark.parametrize("kind", HINT_KINDS)
def test_an_applied_lever_is_seen_and_the_same_traffic_is_not(kind: HintKind) -> None:
    """Applied: a sentence naming what moved; the before side against itself: nothing."""
    before, after = APPLIED[kind]
    shown = _shows(kind, before, after)
    assert shown is not None
    assert "→" in shown
    assert _shows(kind, before, before) is None
    if kind != "model_choice":  # a model's share moved either way is a model replaced
        assert _shows(kind, after, before) is None  # the lever undone is not the lever applied
