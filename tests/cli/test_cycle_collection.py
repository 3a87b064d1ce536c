"""Reading a recording pauses the cyclic garbage collector, and always turns it back on."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from latency_budget.cli import _recorded
from latency_budget.cli._common import CliError
from latency_budget.cli._main import build_parser

from .conftest import BUDGETS, OTLP


def _noting_collector(function: Callable[..., Any], seen: list[bool]) -> Callable[..., Any]:
    def noted(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return function(*args, **kwargs)

    return noted


def test_the_collector_is_paused_while_a_recording_is_read_and_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    monkeypatch.setattr(_recorded, "read_trace_files", _noting_collector(_recorded.read_trace_files, seen))
    monkeypatch.setattr(_recorded, "evaluate_spans", _noting_collector(_recorded.evaluate_spans, seen))
    args = build_parser().parse_args(["report", str(OTLP), "--budgets", str(BUDGETS)])
    recorded = _recorded.load_recorded(args)
    assert recorded.reports  # it read and judged the fixture
    assert seen == [False, False]  # paused while reading, and while judging
    assert gc.isenabled()
    seen.clear()
    _recorded.load_traces(build_parser().parse_args(["doctor", str(OTLP)]))  # doctor reads without judging
    assert seen == [False]
    assert gc.isenabled()


def test_the_collector_is_on_again_after_a_refused_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CliError):
        _recorded.load_recorded(build_parser().parse_args(["report", str(empty)]))
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_host_stays_off() -> None:
    gc.disable()
    try:
        with _recorded.cycle_collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
