"""The context lever and the provider's prompt cache: the net saving of trimming, a cache hit lost included.

Planted traffic: 63 calls of model m whose duration is 100 ms + 0.05 ms per input token
(1,000 to 10,000 tokens; median 5,000), then a call of 8,000 input tokens taking 500 ms.
Trimmed to the median it would save 0.05 x 3,000 = 150 ms (the null control, with no
cache attribute: the old behaviour). With 6,000 of its tokens read from the prompt cache,
only the 2,000 after that prefix can go without losing the hit: 100 ms. With all of them
cached or written to the cache, trimming saves nothing it would not lose: no hint. Each case
goes through the processor (its hint events) and ``report`` (its Where to win).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget._config.model import DEFAULT_QUALITY
from latency_budget._core.call_facts import call_of
from latency_budget._core.levers import RecordedBaseline
from latency_budget._core.levers.context_size import find
from latency_budget._core.recent import WINDOW

from .lever_traffic import Traffic, levers
from .test_lever_hints import chat


def _before(t: Traffic) -> None:
    """The model's earlier calls: 0.05 ms per input token, a median of 5,000 tokens, no cache attribute."""
    for n in range(WINDOW - 1):  # fits are tested once a window is full
        tokens = 1000 * (1 + n % 10)
        t.send(("chat m", 100 + 0.05 * tokens, chat("m", stream=False, **{"gen_ai.usage.input_tokens": tokens})))


def _traffic(last: dict[str, AttributeValue]) -> Traffic:
    t = Traffic()
    _before(t)
    t.send(("chat m", 500, chat("m", stream=False, **{"gen_ai.usage.input_tokens": 8000, **last})))
    return t


def _saving(t: Traffic) -> list[object]:
    return [hint[attr.HINT_SAVINGS_MS] for hint in t.hints("context_size")]


def test_without_a_cache_attribute_the_whole_excess_is_trimmed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: no cached tokens recorded, the excess of 3,000 tokens at 0.05 ms each saves 150 ms."""
    t = _traffic({})
    assert _saving(t) == [150.0]
    (row,) = levers(t.report(tmp_path, capsys), "context_size")
    assert "prompt cache" not in row["basis"]


def test_a_cached_prefix_leaves_only_the_uncached_tail_to_trim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """6,000 of 8,000 tokens read from the cache: the net saving is the 2,000-token tail's 100 ms, not 150 ms."""
    cached = _traffic({"gen_ai.usage.cache_read.input_tokens": 6000})
    assert _saving(cached) == [100.0]
    (row,) = levers(cached.report(tmp_path, capsys), "context_size")
    (control,) = levers(_traffic({}).report(tmp_path, capsys), "context_size")
    # The same requests earn the lever in report (every call above the median, over the whole
    # recording); the last one saves 50 ms less, and the basis says why.
    assert row["requests"] == control["requests"]
    assert control["savings_total_ms"] - row["savings_total_ms"] == pytest.approx(50.0)
    assert "prompt cache" in row["basis"]
    assert "keep that prefix" in row["try"]


def test_no_hint_where_the_whole_excess_lies_in_the_cached_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """7,500 tokens read from the cache and 500 written to it: trimming would lose the hit, so no hint."""
    t = _traffic({"gen_ai.usage.cache_read.input_tokens": 7500, "gen_ai.usage.cache_creation.input_tokens": 500})
    assert _saving(t) == []
    (row,) = levers(t.report(tmp_path, capsys), "context_size")
    (control,) = levers(_traffic({}).report(tmp_path, capsys), "context_size")
    assert row["requests"] == control["requests"] - 1
    assert control["savings_total_ms"] - row["savings_total_ms"] == pytest.approx(150.0)


@pytest.mark.parametrize(
    "spelling",
    ["gen_ai.usage.cache_read_input_tokens", "llm.token_count.prompt_details.cache_read"],
    ids=["OpenLLMetry", "OpenInference"],
)
def test_the_lever_reads_the_cache_in_the_other_dialects_spellings(spelling: str) -> None:
    """The finder itself, on a recording: OpenLLMetry's and OpenInference's cached counts lower the saving alike."""
    calls = [
        call_of(n, "model_call", n * 10**10, n * 10**10 + int((100 + 0.05 * tokens) * 1e6), None, attributes)
        for n, (tokens, attributes) in enumerate(
            (1000 * (1 + n % 10), chat("m", stream=False, **{"gen_ai.usage.input_tokens": 1000 * (1 + n % 10)}))
            for n in range(WINDOW - 1)
        )
    ]
    last = chat("m", stream=False, **{"gen_ai.usage.input_tokens": 8000, spelling: 6000})
    calls.append(call_of(99, "model_call", 10**15, 10**15 + 500_000_000, None, last))
    found = find("model_call", [calls[-1]], RecordedBaseline(calls), 10_000.0, {}, DEFAULT_QUALITY)
    assert found is not None
    assert found.saving_ms == pytest.approx(100.0)
    assert found.naive_ms == pytest.approx(150.0)
