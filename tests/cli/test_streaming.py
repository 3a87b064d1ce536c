"""Reading recordings trace by trace: the window, the repairs in reading order, what is held, and the progress bar."""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import re
import sys
import tracemalloc
from pathlib import Path
from typing import ClassVar

import pytest
from opentelemetry.trace import SpanKind

from latency_budget._replay import SpanRecord
from latency_budget.cli import main
from latency_budget.cli._inputs import TraceInputError, TraceWindow, parse_trace_files, read_trace_files
from latency_budget.cli._inputs._spans import ParsedSpan, assemble
from latency_budget.cli._inputs.otlp import SharedStrings
from latency_budget.cli._levers import analyse_levers
from latency_budget.cli._progress import ProgressBar
from latency_budget.cli._recorded import DEFAULT_WINDOW, _judge_files, _megabytes, load_config

from .conftest import REPO

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden" / "traces.jsonl"
BUDGETS = Path(__file__).resolve().parent / "fixtures" / "budgets.yaml"
sys.path.insert(0, str(REPO / "benchmarks"))

import scaling  # type: ignore[import-not-found]  # noqa: E402 - the benchmark's own recordings
import workloads  # type: ignore[import-not-found]  # noqa: E402


def _report(*options: str) -> tuple[dict[str, object], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["report", str(GOLDEN), "--budgets", str(BUDGETS), "--format", "json", *options]) == 0
    return json.loads(out.getvalue()), err.getvalue()


def test_a_window_too_short_for_the_recording_is_warned_about() -> None:
    """Traces whose spans lie further apart than --window are judged in parts, and stderr says to raise it."""
    whole, quiet = _report()
    parted, warned = _report("--window", "1")
    assert "raise --window" not in quiet
    assert re.search(r"\d+ spans came more than --window 1 span after the rest of their trace", warned)
    assert parted["requests"] != whole["requests"]  # the parts are judged as requests of their own


def _parsed(trace_id: int, span_id: int, where: str, parent_id: int | None = None) -> ParsedSpan:
    record = SpanRecord(trace_id, span_id, parent_id, "work", 0, 10, SpanKind.INTERNAL)
    return ParsedSpan(record, "process", remote_known=False, where=where)


def test_a_trace_closes_once_window_spans_have_passed_since_its_last_span() -> None:
    """Traces stay open until `window` spans have been read after their last one; at most the window is open."""
    window = TraceWindow(4)
    closed: list[int] = []
    most_open = 0
    for trace in range(1, 101):
        spans = [_parsed(trace, n, f"line {trace}", None if n == 1 else 1) for n in (1, 2)]
        closed += [records[0].trace_id for records in window.add(spans)]
        most_open = max(most_open, window.open_traces)
    assert closed == list(range(1, 99))  # each trace closes once the next two traces (4 spans) are read
    assert most_open == 2
    assert [records[0].trace_id for records in window.finish()] == [99, 100]
    assert window.trace_count == 100
    assert window.late_spans == 0


def test_repairs_name_the_first_in_reading_order_whichever_trace_closes_first() -> None:
    """Duplicates in two traces: the counts add up, and the first named is the first read, as a whole read says."""
    spans = [
        _parsed(1, 1, "a:1"),
        _parsed(1, 1, "a:2"),  # the first duplicate read, of trace 1, which closes last
        _parsed(2, 1, "a:3"),
        _parsed(2, 1, "a:4"),
        _parsed(1, 2, "a:5", parent_id=1),
    ]
    window = TraceWindow(1)
    closed = [*window.add(spans), *window.finish()]
    assert [records[0].trace_id for records in closed] == [2, 1]
    assert window.repairs() == assemble(spans)[1]
    assert window.repairs().first_duplicate == "a:2"
    assert window.repairs().duplicate_spans == 2


def test_files_are_parsed_line_by_line(tmp_path: Path) -> None:
    """The spans of a line are handed on before a later line is read: a broken line 3 fails only after line 1."""
    lines = GOLDEN.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "broken.jsonl"
    path.write_text(f"{lines[0]}\n{lines[1]}\n{{not json\n", encoding="utf-8")
    batches = parse_trace_files([str(path)])
    assert len(next(batches)) == 20
    assert len(next(batches)) == 20
    with pytest.raises(TraceInputError, match=r"broken.jsonl:3: invalid JSON"):
        next(batches)


def test_spans_share_the_strings_they_repeat() -> None:
    """Names, attribute keys and short values are one object across lines; long values are not kept for sharing."""
    spans = read_trace_files([str(GOLDEN)]).spans
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len({s.name for s in chats}) < len(chats)
    first, *others = [s for s in chats if s.name == chats[0].name]
    assert all(s.name is first.name for s in others)
    key = next(k for k in first.attributes if k.startswith("gen_ai.request.model"))
    assert all(next(k for k in s.attributes if k == key) is key for s in others)
    assert all(s.attributes[key] is first.attributes[key] for s in others)
    assert all(s.resource is first.resource for s in spans)

    strings = SharedStrings(limit=2, longest=5)
    long = "".join(["x"] * 6)
    assert strings.share(long) is long
    assert strings.share("".join(["x"] * 6)) is not long
    a, b = "ab", "cd"
    strings.share(a)
    strings.share(b)
    assert strings.share("".join(["a", "b"])) is a
    assert strings.share("".join(["e", "f"])) is not strings.share("".join(["e", "f"]))  # full: not shared


def _arguments(path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        traces=[str(path)],
        service=None,
        window=DEFAULT_WINDOW,
        max_input_size=1 << 30,
        max_line_size=256 << 20,
        max_json_depth=100,
        max_spans=1_000_000,
    )


def held_bytes(tmp_path: Path) -> dict[str, float]:
    """Bytes held per span of a whole read, and per request of a streamed one (with its calls, and without)."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(workloads.BUDGETS, encoding="utf-8")
    config, _ = load_config(str(budgets))
    figures: dict[str, list[float]] = {"span": [], "request": [], "request_without_calls": [], "after_levers": []}
    for traces in (300, 600):
        path = tmp_path / f"standard-{traces}.jsonl"
        scaling.write_recording(scaling.WORKLOADS["standard"], traces * 10, path)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            whole = read_trace_files([str(path)])
            gc.collect()
            figures["span"].append(tracemalloc.get_traced_memory()[0] - before)
            del whole
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            bare = _judge_files(_arguments(path), config, levers=False)
            gc.collect()
            figures["request_without_calls"].append(tracemalloc.get_traced_memory()[0] - before)
            del bare
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            kept = _judge_files(_arguments(path), config)
            gc.collect()
            figures["request"].append(tracemalloc.get_traced_memory()[0] - before)
            analyse_levers(kept[1], config)
            gc.collect()
            figures["after_levers"].append(tracemalloc.get_traced_memory()[0] - before)
            del kept
        finally:
            tracemalloc.stop()
    # The difference between 600 and 300 requests: what does not grow with the recording cancels.
    per_request = {key: (values[1] - values[0]) / 300 for key, values in figures.items() if key != "span"}
    return {"span": (figures["span"][1] - figures["span"][0]) / 3000, **per_request}


def test_docs_quote_the_bytes_held_per_span_and_per_request(tmp_path: Path) -> None:
    """docs/cli.md's bytes per span (whole read) and per request (streamed, with and without calls), to 10%."""
    text = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    quoted = re.search(
        r"about \*\*([\d,]+) bytes\*\* per span .*? about \*\*([\d,]+) bytes\*\* per request "
        r"with its calls \(`report` and `check`\), ([\d,]+) without them \(`suggest`\)",
        text,
    )
    assert quoted is not None
    span, request, bare = (int(group.replace(",", "")) for group in quoted.groups())
    measured = held_bytes(tmp_path)
    assert span == pytest.approx(measured["span"], rel=0.1)
    assert request == pytest.approx(measured["request"], rel=0.1)
    assert bare == pytest.approx(measured["request_without_calls"], rel=0.1)


def test_the_levers_keep_nothing_more_per_request_once_the_calls_are_read(tmp_path: Path) -> None:
    """The calls are read as each trace closes: analysing the levers afterwards holds no more per request."""
    measured = held_bytes(tmp_path)
    assert measured["request_without_calls"] < measured["request"]  # the calls are kept, and cost something
    assert measured["after_levers"] == pytest.approx(measured["request"], abs=64)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_counts_items_and_their_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading bar shows megabytes read of the total, then the spans read and spans per second."""
    monkeypatch.setenv("TERM", "xterm")
    now = [0.0]
    terminal = _Terminal()
    bar = ProgressBar(
        50_000_000, "reading", stream=terminal, delay_s=0.5, width=10, clock=lambda: now[0], counter=_megabytes
    )
    bar.update(1_000_000, items=1_000)
    assert terminal.getvalue() == ""
    now[0] = 2.0
    bar.update(25_000_000, items=30_000)
    assert terminal.getvalue() == "\rreading [#####.....] 25/50 MB, 30,000 spans, 15,000 spans/s"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        print(held_bytes(Path(folder)))


class _RecordingBar:
    """Stands in for ProgressBar: enabled, and keeps what it was told."""

    made: ClassVar[list[_RecordingBar]] = []

    def __init__(self, total: int, label: str, **options: object) -> None:
        self.total, self.label = total, label
        self.enabled = True
        self.updates: list[tuple[int, int | None]] = []
        self.closed = False
        _RecordingBar.made.append(self)

    def update(self, done: int, total: int | None = None, *, items: int | None = None) -> None:
        self.updates.append((done, items))

    def close(self) -> None:
        self.closed = True


def test_reading_a_file_drives_the_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading bar's total is the file's size; it is told the bytes and spans read after each line, then closed."""
    monkeypatch.setattr("latency_budget.cli._recorded.ProgressBar", _RecordingBar)
    _RecordingBar.made.clear()
    _report()
    (bar,) = _RecordingBar.made
    lines = GOLDEN.read_text(encoding="utf-8").count("\n")
    assert (bar.label, bar.total) == ("reading", GOLDEN.stat().st_size)
    assert len(bar.updates) == lines
    assert bar.updates[-1] == (GOLDEN.stat().st_size, 303)
    assert [items for _, items in bar.updates] == sorted(items for _, items in bar.updates)
    assert bar.closed
