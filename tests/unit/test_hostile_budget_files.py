"""Hostile and broken budget files: bounded work, one file:line error, and an application never held up.

The files here are small; what they would make an unbounded reader do is large (a
"billion laughs" of aliases, nesting thousands deep, a FIFO no one writes to). Each must
end promptly in one :class:`BudgetConfigError`, at start-up and under live reload.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget import BudgetConfigError, LatencyBudgetProcessor, load_budgets
from latency_budget._config import BudgetConfig, limits
from latency_budget._config.reload import BudgetFileWatcher

GOOD = "version: 1\nstages:\n  alpha:\n    budget_ms: 300\n    match: {name: 'work*'}\n"
OTHER = "version: 1\nstages:\n  beta:\n    budget_ms: 250\n    match: {name: 'work*'}\n"

_LAUGHS = "".join(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10))
BILLION_LAUGHS = "version: 1\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + _LAUGHS

# (name, file content, the start of the error: file name and line come first)
HOSTILE: list[tuple[str, bytes, str]] = [
    # The line of the value being expanded when the count crossed the cap, and the path to it.
    ("alias bomb", BILLION_LAUGHS.encode(), "budgets.yaml:2: l4[1][5][2][2][8]: the document has more than"),
    ("recursive alias", b"version: 1\nstages: &s\n  x: *s\n", "budgets.yaml:2: stages.x: recursive alias"),
    ("deep flow nesting", b"version: 1\nx: " + b"[" * 50_000 + b"]" * 50_000, "budgets.yaml:2: invalid YAML: nested"),
    (
        "deep block nesting",
        ("version: 1\n" + "".join(" " * n + "a:\n" for n in range(60))).encode(),
        "budgets.yaml:",
    ),
    ("NUL byte", b"version: 1\nstages:\x00\n", "budgets.yaml:2: a NUL byte"),
    ("UTF-16 without BOM", "version: 1\n".encode("utf-16-le"), "budgets.yaml:1: a NUL byte: is the file UTF-16"),
    ("UTF-16 with BOM", "version: 1\n".encode("utf-16"), "budgets.yaml:1: the file is UTF-16"),
    ("control character", b"version: 1\n\x07\n", "budgets.yaml:2: invalid YAML: unacceptable character U+0007"),
    ("not UTF-8", b"version: 1\n\xff\n", "budgets.yaml:2: not UTF-8 text"),
    ("5,000-digit integer", b"version: 1\ntotal_ms: " + b"9" * 5000 + b"\n", "budgets.yaml:2: total_ms: integer"),
    ("huge hex integer", b"version: 1\ntotal_ms: 0x" + b"f" * 20_000 + b"\n", "budgets.yaml:2: total_ms: integer"),
    ("impossible date", b"version: 1\ntotal_ms: 2001-02-30\n", "budgets.yaml:2: total_ms: invalid timestamp"),
    ("bad tagged bool", b"version: 1\ntotal_ms: !!bool maybe\n", "budgets.yaml:2: total_ms: invalid bool"),
    ("oversized file", b"version: 1\n#" + b"x" * limits.MAX_FILE_BYTES + b"\n", "budgets.yaml: the file is larger"),
    (
        "too many values",
        ("version: 1\nx: [" + ", ".join(["1"] * (limits.MAX_NODES + 5)) + "]\n").encode(),
        "budgets.yaml:2: the document has more than",
    ),
    (
        "too many stages",
        (
            "version: 1\nstages:\n" + "".join(f"  s{n}: {{match: {{name: x}}}}\n" for n in range(limits.MAX_STAGES + 1))
        ).encode(),
        f"budgets.yaml:3: stages: more than {limits.MAX_STAGES} stages",
    ),
    (
        "too many rules",
        ("version: 1\nstages:\n  s:\n    match:\n" + "      - {name: x}\n" * (limits.MAX_RULES + 1)).encode(),
        f"budgets.yaml:{5 + limits.MAX_RULES}: stages.s.match[{limits.MAX_RULES}]: more than",
    ),
]


def run_bounded(action: Callable[[], object], what: str) -> object:
    """Run ``action`` on a thread and fail (instead of hanging the suite) if it has not returned within 60 s."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"{what} blocked"
    return outcome[0]


@pytest.mark.parametrize(("content", "message"), [pytest.param(c, m, id=n) for n, c, m in HOSTILE])
def test_hostile_file_is_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    """Each hostile budget file ends in one single-line BudgetConfigError naming the file (and the line, if any)."""
    path = tmp_path / "budgets.yaml"
    path.write_bytes(content)
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(path)
    text = str(caught.value)
    assert text.startswith(str(tmp_path / message)), text
    assert "\n" not in text


@pytest.mark.parametrize("make", ["fifo", "device", "directory"])
def test_a_file_that_is_not_a_regular_file_is_refused_without_reading(tmp_path: Path, make: str) -> None:
    """A FIFO nobody writes to, /dev/zero and a directory are refused at once: nothing blocks or fills memory."""
    if make == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("needs os.mkfifo")
        path = str(tmp_path / "budgets.yaml")
        os.mkfifo(path)
    else:
        path = "/dev/zero" if make == "device" else str(tmp_path)
        if not os.path.exists(path):
            pytest.skip(f"needs {path}")
    outcome = run_bounded(lambda: load_budgets(path), "load_budgets")
    assert isinstance(outcome, BudgetConfigError)
    assert str(outcome).startswith(f"{path}: cannot read budget file: it is ")
    assert "must be a regular file" in str(outcome)


def test_aliases_within_the_limits_still_work() -> None:
    """Anchors and aliases that a real file might use to share a rule load as before."""
    config = load_budgets(
        text="version: 1\nstages:\n  a: {budget_ms: 10, match: &rule {name: 'x*'}}\n"
        "  b: {budget_ms: 20, match: *rule}\n"
    )
    assert config.stage_names == ("a", "b")


# -- live reload and the processor ----------------------------------------------------------


def backdate(path: Path, seconds: float = 60) -> None:
    """Make the file look left alone for ``seconds`` (its mtime that far back), so it has settled."""
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


@pytest.fixture
def budget_file(tmp_path: Path) -> Path:
    """budgets.yaml holding GOOD, settled."""
    path = tmp_path / "budgets.yaml"
    path.write_text(GOOD, encoding="utf-8")
    backdate(path)
    return path


@pytest.fixture
def processor(budget_file: Path) -> Iterator[LatencyBudgetProcessor]:
    """A processor watching budget_file, without an interval thread."""
    processor = LatencyBudgetProcessor(budget_file, SimpleSpanProcessor(InMemorySpanExporter()))
    yield processor
    processor.shutdown()


def test_half_written_file_is_never_judged(budget_file: Path, processor: LatencyBudgetProcessor) -> None:
    """A file caught mid-write (a valid prefix, just written) is not loaded; the finished file is, once settled."""
    budget_file.write_text(GOOD.replace("budget_ms: 300", "budget_ms: 3"), encoding="utf-8")  # mtime: now
    assert processor.reload_now() is False
    assert processor.config.default.stage("alpha").budget_ms == 300.0
    budget_file.write_text(GOOD.replace("budget_ms: 300", "budget_ms: 3000"), encoding="utf-8")
    backdate(budget_file)
    assert processor.reload_now() is True
    assert processor.config.default.stage("alpha").budget_ms == 3000.0


def test_change_with_a_future_mtime_loads_once_seen_unchanged_for_the_settle_time(tmp_path: Path) -> None:
    """When the mtime cannot tell (clock skew puts it ahead), the version must stay unchanged for settle_s."""
    path = tmp_path / "budgets.yaml"
    path.write_text(GOOD, encoding="utf-8")
    now = [1000.0]
    swapped: list[BudgetConfig] = []
    watcher = BudgetFileWatcher(path, swapped.append, settle_s=2.0, clock=lambda: now[0])
    watcher.load()
    path.write_text(OTHER, encoding="utf-8")
    ahead = time.time_ns() + 3600 * 10**9
    os.utime(path, ns=(ahead, ahead))
    assert watcher.check() is False  # first seen now
    now[0] += 1.0
    assert watcher.check() is False  # unchanged for 1 s only
    now[0] += 1.5
    assert watcher.check() is True
    assert [config.stage_names for config in swapped] == [("beta",)]
    watcher.stop()


def test_a_change_too_recent_is_loaded_by_a_follow_up_check(tmp_path: Path) -> None:
    """reload_now() on a file changed moments ago returns False and one follow-up check loads it when settled."""
    path = tmp_path / "budgets.yaml"
    path.write_text(GOOD, encoding="utf-8")
    loaded = threading.Event()
    swapped: list[BudgetConfig] = []

    def on_change(config: BudgetConfig) -> None:
        swapped.append(config)
        loaded.set()

    watcher = BudgetFileWatcher(path, on_change, settle_s=0.2)
    watcher.load()
    path.write_text(OTHER, encoding="utf-8")
    assert watcher.check() is False
    assert loaded.wait(timeout=60)
    assert [config.stage_names for config in swapped] == [("beta",)]
    watcher.stop()


@pytest.mark.parametrize(("content", "message"), [pytest.param(c, m, id=n) for n, c, m in HOSTILE])
def test_each_broken_version_is_logged_once_whatever_its_error(
    budget_file: Path,
    processor: LatencyBudgetProcessor,
    caplog: pytest.LogCaptureFixture,
    content: bytes,
    message: str,
) -> None:
    """A hostile rewrite keeps the last good budgets; its one-line error is logged once over three checks."""
    good = processor.config
    budget_file.write_bytes(content)
    backdate(budget_file)
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        results = [processor.reload_now() for _ in range(3)]
    assert results == [False, False, False]
    assert processor.config is good
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert str(budget_file.parent / message) in errors[0].getMessage()
    assert errors[0].exc_info is None  # one line, no traceback


def test_an_unexpected_exception_is_logged_once_per_version(
    budget_file: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even an error that is not a BudgetConfigError is logged once for a version, not on every check."""
    swapped: list[BudgetConfig] = []
    watcher = BudgetFileWatcher(budget_file, swapped.append)
    watcher.load()

    def explode(*args: object, **kwargs: object) -> BudgetConfig:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("latency_budget._config.reload.load_budgets", explode)
    budget_file.write_text(OTHER, encoding="utf-8")
    backdate(budget_file)
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        assert [watcher.check() for _ in range(3)] == [False, False, False]
    assert len(caplog.records) == 1
    assert "RecursionError" in caplog.records[0].getMessage()
    assert swapped == []
    watcher.stop()


def test_a_fifo_never_holds_up_start_up_reload_or_shutdown(budget_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A FIFO as the budget file: start-up fails at once, and a watched file replaced by one keeps the
    budgets; reload_now() and shutdown() return, with one error logged."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs os.mkfifo")
    fifo = budget_file.parent / "fifo.yaml"
    os.mkfifo(fifo)
    outcome = run_bounded(lambda: LatencyBudgetProcessor(fifo, SimpleSpanProcessor(InMemorySpanExporter())), "start")
    assert isinstance(outcome, BudgetConfigError)
    assert "FIFO" in str(outcome)

    processor = LatencyBudgetProcessor(budget_file, SimpleSpanProcessor(InMemorySpanExporter()), reload_interval_s=60)
    good = processor.config
    budget_file.unlink()
    os.mkfifo(budget_file)
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        assert run_bounded(lambda: [processor.reload_now() for _ in range(2)], "reload_now") == [False, False]
    assert processor.config is good
    assert len(caplog.records) == 1
    assert "FIFO" in caplog.records[0].getMessage()
    run_bounded(processor.shutdown, "shutdown")
