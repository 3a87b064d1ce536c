"""Live reload of the budget file: atomic swaps, broken files, concurrent traffic, the interval thread."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._config import BudgetConfig
from latency_budget._config.reload import RELOAD_INTERVAL_ENV, BudgetFileWatcher

from .helpers import TECHCORP_YAML, at, in_forked_child

ALPHA = "version: 1\nstages:\n  alpha:\n    budget_ms: 100\n    match: {name: 'work*'}\n"
BETA = "version: 1\nstages:\n  beta:\n    budget_ms: 250\n    match: {name: 'work*'}\n"
# Line 4 holds the bad value: the logged error must name it.
BROKEN = "version: 1\nstages:\n  alpha:\n    budget_ms: fast\n    match: {name: 'work*'}\n"


def write_settled(path: Path, text: str) -> None:
    """Write a budget file as one left alone since a minute ago: its mtime is that old, so it has settled."""
    path.write_text(text, encoding="utf-8")
    a_minute_ago = time.time_ns() - 60 * 10**9
    os.utime(path, ns=(a_minute_ago, a_minute_ago))


class Setup:
    """A budget file, a processor loaded from it, and a provider exporting into memory."""

    def __init__(self, path: Path, processor: LatencyBudgetProcessor, exporter: InMemorySpanExporter) -> None:
        self.path = path
        self.processor = processor
        self.exporter = exporter
        self.provider = TracerProvider()
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("tests")

    def write(self, text: str) -> None:
        write_settled(self.path, text)

    def request(self, *, children: int = 1, child_ms: float = 150) -> int:
        """One trace: a root and ``children`` sequential `work` spans. Returns the root's trace id."""
        root = self.tracer.start_span("request", start_time=at(0))
        context = trace.set_span_in_context(root)
        for n in range(children):
            self.tracer.start_span(f"work {n}", context=context, start_time=at(n * child_ms)).end(
                end_time=at((n + 1) * child_ms)
            )
        root.end(end_time=at(children * child_ms + 10))
        return root.get_span_context().trace_id

    def root_of(self, trace_id: int) -> dict[str, object]:
        roots = [
            s for s in self.exporter.get_finished_spans() if s.name == "request" and s.context.trace_id == trace_id
        ]
        assert len(roots) == 1
        return dict(roots[0].attributes or {})


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A processor watching budgets.yaml (initially ALPHA), without an interval thread."""
    path = tmp_path / "budgets.yaml"
    path.write_text(ALPHA, encoding="utf-8")
    exporter = InMemorySpanExporter()
    processor = LatencyBudgetProcessor(path, SimpleSpanProcessor(exporter), late_span_grace_ms=0)
    yield Setup(path, processor, exporter)
    processor.shutdown()


def stage_keys(attributes: dict[str, object]) -> set[str]:
    """The stage names that appear in a root's latency_budget.stages.* attributes."""
    return {key.split(".")[2] for key in attributes if key.startswith("latency_budget.stages.")}


# -- reload_now ---------------------------------------------------------------------------


def test_unchanged_file_is_not_reloaded(setup: Setup) -> None:
    """reload_now() on an unchanged file swaps nothing and keeps the very same config."""
    before = setup.processor.config
    assert setup.processor.reload_now() is False
    assert setup.processor.config is before


def test_changed_file_is_swapped_in_for_new_traces(setup: Setup) -> None:
    """A rewritten file loads on reload_now(); the next trace is judged by the new stages and budgets."""
    first = setup.request()
    setup.write(BETA)
    assert setup.processor.reload_now() is True
    assert setup.processor.config.stage_names == ("beta",)
    second = setup.request()
    assert stage_keys(setup.root_of(first)) == {"alpha"}
    assert stage_keys(setup.root_of(second)) == {"beta"}
    assert setup.root_of(second)["latency_budget.stages.beta.budget_ms"] == 250.0


def test_same_size_rewrite_is_detected(setup: Setup) -> None:
    """A rewrite that keeps the file's size (and maybe its mtime) is still picked up: the content is hashed."""
    setup.write(ALPHA.replace("100", "900"))
    assert setup.processor.reload_now() is True
    assert setup.processor.config.default.stage("alpha").budget_ms == 900.0


def test_trace_in_flight_finishes_under_the_budgets_it_started_with(setup: Setup) -> None:
    """A trace whose root started before a reload classifies and judges its later spans with the old budgets."""
    root = setup.tracer.start_span("request", start_time=at(0))
    setup.write(BETA)
    assert setup.processor.reload_now() is True
    context = trace.set_span_in_context(root)
    setup.tracer.start_span("work late", context=context, start_time=at(0)).end(end_time=at(150))
    root.end(end_time=at(200))
    spans = {s.name: dict(s.attributes or {}) for s in setup.exporter.get_finished_spans()}
    assert spans["work late"]["latency_budget.stage"] == "alpha"
    assert stage_keys(spans["request"]) == {"alpha"}
    # 150 ms against alpha's 100; the 200 ms request against the total, alpha's 100 (beta's 250 would pass it)
    assert spans["request"]["latency_budget.over_budget_stages"] == ("alpha", "total")


def test_config_loaded_from_a_file_is_watched_too(tmp_path: Path) -> None:
    """A BudgetConfig whose source is a file reloads like a path; changes after the processor starts count."""
    path = tmp_path / "budgets.yaml"
    path.write_text(ALPHA, encoding="utf-8")
    processor = LatencyBudgetProcessor(load_budgets(path), SimpleSpanProcessor(InMemorySpanExporter()))
    assert processor.reload_now() is False
    write_settled(path, BETA)
    assert processor.reload_now() is True
    assert processor.config.stage_names == ("beta",)
    processor.shutdown()


def test_budgets_from_text_have_nothing_to_reload(caplog: pytest.LogCaptureFixture) -> None:
    """Budgets loaded from text cannot reload: reload_now() is False and an interval logs one warning."""
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        processor = LatencyBudgetProcessor(
            load_budgets(text=TECHCORP_YAML), SimpleSpanProcessor(InMemorySpanExporter()), reload_interval_s=5
        )
    assert processor.reload_interval_s is None
    assert processor.reload_now() is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "live reload" in r.getMessage()]
    assert len(warnings) == 1
    processor.shutdown()


# -- broken files -------------------------------------------------------------------------


def test_broken_file_keeps_the_last_good_budgets_and_logs_once(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    """A broken rewrite keeps the old budgets and logs file:line: key once, however often it is checked."""
    good = setup.processor.config
    setup.write(BROKEN)
    with caplog.at_level(logging.INFO, logger="latency_budget"):
        results = [setup.processor.reload_now() for _ in range(3)]
        trace_id = setup.request()
    assert results == [False, False, False]
    assert setup.processor.config is good
    assert stage_keys(setup.root_of(trace_id)) == {"alpha"}
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert f"{setup.path}:4: stages.alpha.budget_ms: expected a positive number, got 'fast'" in errors[0]


def test_fixed_file_after_a_broken_one_is_picked_up(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    """After a broken version, the next good file loads; a new broken version is logged again."""
    with caplog.at_level(logging.INFO, logger="latency_budget"):
        setup.write(BROKEN)
        assert setup.processor.reload_now() is False
        setup.write(BETA)
        assert setup.processor.reload_now() is True
        setup.write(BETA.replace("250", "-1"))
        assert setup.processor.reload_now() is False
    assert setup.processor.config.stage_names == ("beta",)
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == [logging.ERROR, logging.INFO, logging.ERROR]
    assert "reloaded budgets from" in messages[1][1]
    assert "stages.beta.budget_ms: expected a positive number, got -1" in messages[2][1]


def test_missing_file_keeps_the_budgets_and_logs_once(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    """A deleted budget file keeps the last good budgets, logs one error, and a new file is loaded later."""
    good = setup.processor.config
    setup.path.unlink()
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        assert [setup.processor.reload_now() for _ in range(2)] == [False, False]
    assert setup.processor.config is good
    assert len(caplog.records) == 1
    assert "cannot read budget file" in caplog.records[0].getMessage()
    setup.write(BETA)
    assert setup.processor.reload_now() is True


def test_a_failing_swap_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An error inside the swap is logged, and check() returns False instead of raising."""
    path = tmp_path / "budgets.yaml"
    path.write_text(ALPHA, encoding="utf-8")

    def explode(config: BudgetConfig) -> None:
        raise RuntimeError("boom")

    watcher = BudgetFileWatcher(path, explode)
    watcher.load()
    write_settled(path, BETA)
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        assert watcher.check() is False
    assert "internal error" in caplog.records[0].getMessage()


# -- concurrency ----------------------------------------------------------------------------


def test_reload_under_concurrent_traffic_loses_and_duplicates_no_span(setup: Setup) -> None:
    """Threads create traces while the file flips between two configs: every span is exported exactly once,
    and each trace is judged wholly under one config."""
    workers, traces_per_worker, children = 4, 60, 3
    created: list[int] = []
    created_lock = threading.Lock()
    barrier = threading.Barrier(workers + 1)

    def work() -> None:
        barrier.wait()
        for _ in range(traces_per_worker):
            root = setup.tracer.start_span("request", start_time=at(0))
            context = trace.set_span_in_context(root)
            ids = [root.get_span_context().span_id]
            for n in range(children):
                child = setup.tracer.start_span(f"work {n}", context=context, start_time=at(n * 50))
                ids.append(child.get_span_context().span_id)
                child.end(end_time=at(n * 50 + 40))
            root.end(end_time=at(200))
            with created_lock:
                created.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    swaps = 0
    while swaps < 2 or any(thread.is_alive() for thread in threads):
        setup.write(BETA if swaps % 2 == 0 else ALPHA)
        assert setup.processor.reload_now() is True
        swaps += 1
    for thread in threads:
        thread.join()

    exported = setup.exporter.get_finished_spans()
    assert Counter(s.context.span_id for s in exported) == Counter(created)
    assert len(created) == workers * traces_per_worker * (children + 1)
    by_trace: dict[int, list[dict[str, object]]] = {}
    roots: dict[int, dict[str, object]] = {}
    for span in exported:
        attributes = dict(span.attributes or {})
        if span.name == "request":
            roots[span.context.trace_id] = attributes
        else:
            by_trace.setdefault(span.context.trace_id, []).append(attributes)
    assert len(roots) == workers * traces_per_worker
    for trace_id, root in roots.items():
        (stage,) = stage_keys(root)
        assert root[f"latency_budget.stages.{stage}.count"] == children
        assert {child["latency_budget.stage"] for child in by_trace[trace_id]} == {stage}


# -- the interval thread and the environment variable -----------------------------------------


class Ticks(threading.Event):
    """An Event whose wait() returns only when the test ticks it (or stop() sets it)."""

    def __init__(self) -> None:
        super().__init__()
        self._tick = threading.Semaphore(0)
        self.waiting = threading.Semaphore(0)  # released each time the thread starts waiting
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        self.waiting.release()
        self._tick.acquire()
        return self.is_set()

    def tick(self) -> None:
        self._tick.release()

    def set(self) -> None:
        super().set()
        self._tick.release()


def test_interval_thread_checks_once_per_tick_and_stops(tmp_path: Path) -> None:
    """The watcher thread waits the interval between checks, swaps a changed file on a tick; stop() ends it."""
    path = tmp_path / "budgets.yaml"
    path.write_text(ALPHA, encoding="utf-8")
    swapped: list[BudgetConfig] = []
    watcher = BudgetFileWatcher(path, swapped.append)
    watcher.load()
    ticks = Ticks()
    watcher.start(7.5, wakeup=ticks)
    assert ticks.waiting.acquire(timeout=10)  # waiting before its first check
    write_settled(path, BETA)
    ticks.tick()
    assert ticks.waiting.acquire(timeout=10)  # one check done, waiting again
    assert [config.stage_names for config in swapped] == [("beta",)]
    ticks.tick()
    assert ticks.waiting.acquire(timeout=10)
    assert len(swapped) == 1  # unchanged since: nothing to swap
    assert ticks.timeouts == [7.5, 7.5, 7.5]
    watcher.stop()
    assert not watcher.running


def test_processor_interval_thread_picks_up_a_change(setup: Setup) -> None:
    """With reload_interval_s the processor's own thread swaps in a changed file; shutdown() stops the thread."""
    reloaded = threading.Event()

    class Signal(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "reloaded budgets" in record.getMessage():
                reloaded.set()

    handler = Signal(logging.INFO)
    logger = logging.getLogger("latency_budget")
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    before = set(threading.enumerate())
    exporter = InMemorySpanExporter()
    processor = LatencyBudgetProcessor(setup.path, SimpleSpanProcessor(exporter), reload_interval_s=1)
    try:
        (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "latency-budget-reload"]
        assert processor.reload_interval_s == 1.0
        setup.write(BETA)
        assert reloaded.wait(timeout=30)
        assert processor.config.stage_names == ("beta",)
    finally:
        processor.shutdown()
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    assert not thread.is_alive()
    processor.shutdown()  # twice is fine


def test_environment_variable_sets_the_interval(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_LATENCY_BUDGET_RELOAD_INTERVAL turns reload on; the argument wins over it."""
    monkeypatch.setenv(RELOAD_INTERVAL_ENV, " 30 ")
    from_env = LatencyBudgetProcessor(setup.path, SimpleSpanProcessor(InMemorySpanExporter()))
    explicit = LatencyBudgetProcessor(setup.path, SimpleSpanProcessor(InMemorySpanExporter()), reload_interval_s=2)
    assert (from_env.reload_interval_s, explicit.reload_interval_s) == (30.0, 2.0)
    from_env.shutdown()
    explicit.shutdown()


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf", "0.5", "1e-9"])
def test_bad_environment_value_warns_once_and_is_ignored(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """A bad OTEL_LATENCY_BUDGET_RELOAD_INTERVAL logs one warning naming it; reload stays off."""
    monkeypatch.setenv(RELOAD_INTERVAL_ENV, value)
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        processor = LatencyBudgetProcessor(setup.path, SimpleSpanProcessor(InMemorySpanExporter()))
    assert processor.reload_interval_s is None
    assert len(caplog.records) == 1
    assert RELOAD_INTERVAL_ENV in caplog.records[0].getMessage()
    processor.shutdown()


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), True, 1e-9, 0.999])
def test_bad_interval_argument_is_an_error(setup: Setup, value: float) -> None:
    """reload_interval_s must be at least one second (the floor): anything else is a ValueError at construction."""
    with pytest.raises(ValueError, match="reload_interval_s"):
        LatencyBudgetProcessor(setup.path, SimpleSpanProcessor(InMemorySpanExporter()), reload_interval_s=value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_restarts_the_reload_thread(tmp_path: Path) -> None:
    """In a forked child the watcher runs a thread of its own again and still reloads; the parent's is untouched."""
    path = tmp_path / "budgets.yaml"
    path.write_text(ALPHA, encoding="utf-8")
    swapped: list[BudgetConfig] = []
    watcher = BudgetFileWatcher(path, swapped.append)
    watcher.load()
    watcher.start(3600)

    def child() -> dict[str, object]:
        running = watcher.running
        write_settled(path, BETA)
        result: dict[str, object] = {"running": running, "swapped": watcher.check()}
        result["stages"] = list(swapped[-1].stage_names)
        watcher.stop()
        result["stopped"] = not watcher.running
        return result

    assert in_forked_child(child) == {"running": True, "swapped": True, "stages": ["beta"], "stopped": True}
    assert watcher.running
    assert swapped == []  # the child's swap happened in the child
    watcher.stop()
    assert not watcher.running
