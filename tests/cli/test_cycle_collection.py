"""Reading a recording runs the cyclic garbage collector less often, and always restores it."""

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


def _noting_threshold(function: Callable[..., Any], seen: list[int]) -> Callable[..., Any]:
    def noted(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return function(*args, **kwargs)

    return noted


def test_reading_raises_the_collectors_threshold_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    seen: list[int] = []
    monkeypatch.setattr(_recorded, "parse_trace_files", _noting_threshold(_recorded.parse_trace_files, seen))
    monkeypatch.setattr(_recorded, "read_trace_files", _noting_threshold(_recorded.read_trace_files, seen))
    recorded = _recorded.load_recorded(build_parser().parse_args(["report", str(OTLP), "--budgets", str(BUDGETS)]))
    assert recorded.reports  # it read and judged the fixture
    _recorded.load_traces(build_parser().parse_args(["doctor", str(OTLP)]))  # doctor reads every span at once
    assert seen == [_recorded._GC_THRESHOLD, _recorded._GC_THRESHOLD]
    assert before[0] < _recorded._GC_THRESHOLD
    assert gc.get_threshold() == before


def test_the_threshold_is_restored_after_a_refused_input(tmp_path: Path) -> None:
    before = gc.get_threshold()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CliError):
        _recorded.load_recorded(build_parser().parse_args(["report", str(empty)]))
    with pytest.raises(CliError):
        _recorded.load_traces(build_parser().parse_args(["doctor", str(empty)]))
    assert gc.get_threshold() == before
