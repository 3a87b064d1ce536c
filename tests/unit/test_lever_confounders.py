"""Levers that one variable stands in for another would fool: planted traffic with known savings, and null controls.

Each case runs requests through the real SDK pipeline (the processor's hints) and then
``report --format json`` on the very spans it exported.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr

from .lever_traffic import Traffic, levers
from .test_lever_hints import chat

REQUESTS = 120
SLOPE = 0.05  # ms per input token, where one is planted


def _context_traffic(seed: int, *, streamed: bool, slope: float) -> tuple[Traffic, float]:
    """One chat call per request whose output grows with its input; ``slope`` ms per input token of prefill.

    The first token takes 150-250 ms plus the prefill, each output token 10 ms after it.
    Returns the traffic and the saving trimming every context to the median would give.
    """
    rng = random.Random(seed)
    traffic = Traffic()
    sizes = [rng.randint(1000, 10000) for _ in range(REQUESTS)]
    middle = sorted(sizes)[REQUESTS // 2]
    truth = 0.0
    for tokens in sizes:
        out = tokens // 10 + rng.randint(-100, 100)
        first = rng.uniform(150, 250) + slope * tokens
        extra: dict[str, AttributeValue] = {"gen_ai.usage.input_tokens": tokens, "gen_ai.usage.output_tokens": out}
        duration = first + 10 * out
        traffic.send(
            ("chat m", duration, chat("m", stream=streamed, ttft_s=first / 1000 if streamed else None, **extra))
        )
        truth += slope * max(0, tokens - middle)
    return traffic, truth


@pytest.mark.parametrize("streamed", [True, False], ids=["first token recorded", "duration only"])
def test_no_context_advice_where_longer_inputs_only_bring_longer_answers(
    streamed: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Prefill independent of the input, answers growing with it: no context hint in process, none in report."""
    traffic, truth = _context_traffic(3501, streamed=streamed, slope=0.0)
    assert truth == 0
    assert traffic.hints("context_size") == []
    assert levers(traffic.report(tmp_path, capsys), "context_size") == []


@pytest.mark.parametrize(
    ("streamed", "basis"), [(True, "ttft"), (False, "duration_given_output")], ids=["first token", "duration"]
)
def test_planted_prefill_is_found_and_says_what_it_fitted(
    streamed: bool, basis: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.05 ms per input token of prefill, answers growing with the input too: found at about the planted slope."""
    traffic, truth = _context_traffic(3502, streamed=streamed, slope=SLOPE)
    found = traffic.hints("context_size")
    assert found, "the planted slope is found in process"
    assert {hint[attr.HINT_BASIS] for hint in found} == {basis}
    (row,) = levers(traffic.report(tmp_path, capsys), "context_size")
    assert row["savings_total_ms"] == pytest.approx(truth, rel=0.25)
    assert ("time to first token" if streamed else "output tokens held fixed") in row["basis"]
