"""Advice a team can act on: one saving threshold for every kind, and no estimate the data does not support."""

from __future__ import annotations

from latency_budget import _attributes as attr
from latency_budget import load_budgets
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
