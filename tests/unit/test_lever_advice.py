"""Advice a team can act on: one saving threshold for every kind, and no estimate the data does not support."""

from __future__ import annotations

import random

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._core.call_facts import Call, sample_of
from latency_budget._core.estimators import rank_test
from latency_budget._core.levers import RecordedBaseline
from latency_budget._core.recent import WINDOW, RecentCalls
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.cli._levers import analyse_levers
from latency_budget.cli._where import levers_json, where_lines

from .helpers import pipeline
from .test_lever_hints import BUDGETS, Requests, hints

SEARCH = {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "where is my order"}


def test_min_saving_ms_holds_back_a_small_cache_hint_and_report_counts_it() -> None:
    """At min_saving_ms 50 a 20 ms cached repeat earns no hint, and report counts what it left out; at 10 it does."""
    strict = BUDGETS.replace("version: 1\n", "version: 1\nhints: {min_saving_ms: 50}\n")
    r = Requests()
    r.p = pipeline(strict)
    r.send(("search", 20, SEARCH))
    repeat = r.send(("search", 20, SEARCH))
    assert "cache" not in hints(repeat)
    replayed = evaluate_spans(load_budgets(text=strict), [record_of(span) for span in r.p.finished()])
    analysis = analyse_levers(replayed, load_budgets(text=strict))
    assert not [lever for lever in analysis.levers if lever.kind == "cache"]
    assert analysis.left_out == 1
    assert where_lines(analysis)[-1] == "Left out: 1 finding that would save less than hints.min_saving_ms."
    assert levers_json(analysis)["left_out_under_min_saving_ms"] == 1
    lenient = BUDGETS.replace("version: 1\n", "version: 1\nhints: {min_saving_ms: 10}\n")
    r = Requests()
    r.p = pipeline(lenient)
    r.send(("search", 20, SEARCH))
    assert hints(r.send(("search", 20, SEARCH)))["cache"][attr.HINT_SAVINGS_MS] == 20.0


def _null_calls(rng: random.Random, model: str, n: int) -> list[Call]:
    """Streamed calls whose durations and first tokens are drawn independently of their token counts."""
    calls, t = [], 0
    for i in range(n):
        duration = round(rng.lognormvariate(6, 0.4) * 1e6)
        first = min(duration, round(rng.lognormvariate(5, 0.4) * 1e6))
        tokens_in, tokens_out = rng.randint(100, 5000), rng.randint(10, 800)
        calls.append(
            Call(
                i,
                "model_call",
                t,
                t + duration,
                first,
                model,
                None,
                None,
                True,
                True,
                False,
                tokens_in,
                tokens_out,
                None,
                None,
            )
        )
        t += duration + 1000
    return calls


def test_no_output_advice_where_generation_time_does_not_grow_with_output() -> None:
    """On calls whose generation time ignores output length, report gives no per-token rate and no output lever."""
    calls = _null_calls(random.Random(3), "m", 300)
    baseline = RecordedBaseline(calls)
    stats = baseline.stats("model_call", "m")
    assert stats is not None
    assert stats.ms_per_output_token is None
    assert stats.rate_from is None
    generating = [(c.output_tokens or 0, (c.end_ns - c.start_ns - (c.first_token_ns or 0)) / 1e6) for c in calls]
    assert not rank_test(generating)


def test_in_process_false_fits_are_as_rare_as_reports_on_null_data() -> None:
    """400 models with no relation between tokens and time: the processor's rate of models ever given a
    context or output estimate is within one percentage point of report's on the same traffic."""
    rng = random.Random(11)
    in_process = {"context": 0, "output": 0}
    recorded = {"context": 0, "output": 0}
    models = 400
    for m in range(models):
        calls = _null_calls(rng, f"m{m}", WINDOW)
        recent = RecentCalls()
        ever = {"context": False, "output": False}
        for call in calls:
            recent.add([sample_of(call)])
            stats = recent.stats("model_call", call.model or "")
            assert stats is not None
            ever["context"] |= stats.context_fit is not None
            ever["output"] |= stats.ms_per_output_token is not None
        whole = RecordedBaseline(calls).stats("model_call", f"m{m}")
        assert whole is not None
        for what, found in (("context", whole.context_fit), ("output", whole.ms_per_output_token)):
            in_process[what] += ever[what]
            recorded[what] += found is not None
    for what, count in in_process.items():
        assert abs(count - recorded[what]) / models <= 0.01, (what, in_process, recorded)
        assert count / models <= 0.03
