"""What the processor remembers of recent calls, so that one trace's lever hints rest on many.

A trace alone rarely says how fast another model would have been, or how latency grows
with context: the last :data:`WINDOW` calls of each model in each stage do. The memory is
bounded (at most :data:`MAX_SERIES` stage-and-model pairs, :data:`MAX_KEYS` call
identities, kept as hashes). A series' statistics are recomputed when asked for after new
calls: after every call for its first :data:`EXACT_UP_TO` calls, then each time its count
doubles, then every :data:`REFRESH` calls (so the statistics describe the last
:data:`WINDOW` calls as of at most that many calls ago), and each fit uses at most
:data:`FIT_POINTS` points, so a root's end rarely pays for one.

Roots end on many threads. Appending to a ``deque`` and reading or writing one dict key
are atomic in CPython, and a snapshot of a deque is taken in one C-level call, so no lock
is needed: a race can only make an estimate one call staler.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from latency_budget._core.call_facts import Call
from latency_budget._core.hints import NAMED_SPANS, Hint
from latency_budget._core.levers import ModelStats, request_levers, summarise
from latency_budget._core.report import TraceReport

__all__ = [
    "EXACT_UP_TO",
    "FIT_POINTS",
    "MAX_KEYS",
    "MAX_SERIES",
    "REFRESH",
    "WINDOW",
    "RecentCalls",
    "add_lever_hints",
]

WINDOW = 64  # calls remembered per model and stage
EXACT_UP_TO = 16  # statistics are recomputed after every call until a series has had this many
REFRESH = 2 * WINDOW  # ... and then at most every this many calls
FIT_POINTS = 32  # points per fit (thinned evenly from the window): 496 pairs, not 2016
MAX_SERIES = 32  # stage-and-model pairs remembered; calls of further pairs are not
MAX_KEYS = 4096  # identities of recent calls, for the cache lever across requests


class _Series:
    """The recent calls of one model in one stage, and their statistics."""

    __slots__ = ("added", "calls", "due", "stats")

    def __init__(self) -> None:
        self.calls: deque[Call] = deque(maxlen=WINDOW)
        self.added = 0
        self.due = 1
        self.stats: ModelStats | None = None

    def summary(self) -> ModelStats | None:
        added = self.added
        if added >= self.due:
            snapshot = list(self.calls)
            if snapshot:
                self.stats = summarise(snapshot, max_fit_points=FIT_POINTS)
            # After every call up to EXACT_UP_TO calls, then each time they double, then every REFRESH.
            self.due = added + 1 if added < EXACT_UP_TO else min(2 * added, added + REFRESH)
        return self.stats


class RecentCalls:
    """A :class:`~latency_budget._core.levers.Baseline` over the calls of recent traces."""

    def __init__(self) -> None:
        self._series: dict[str, dict[str, _Series]] = {}  # stage -> model -> series
        self._count = 0
        self._keys: dict[int, None] = {}  # oldest first

    def add(self, calls: Sequence[Call]) -> bool:
        """Remember the model calls among ``calls``; whether a lever may apply to them.

        ``False`` means that :func:`~latency_budget._core.levers.request_levers` would
        find nothing (a cheap test on what the recent calls say, so that most roots skip
        it); ``True`` only that it may find something.
        """
        maybe = False
        added: list[tuple[Call, dict[str, _Series], _Series]] = []
        for call in calls:
            if call.key is not None:
                maybe = True
            model = call.model
            if model is None:
                continue
            if call.generation and not call.streamed and not call.to_tools:
                maybe = True  # a streaming candidate
            models = self._series.get(call.stage)
            if models is None:
                models = self._series.setdefault(call.stage, {})
            series = models.get(model)
            if series is None:
                if self._count >= MAX_SERIES:
                    continue
                self._count += 1
                series = models.setdefault(model, _Series())
            series.calls.append(call)
            series.added += 1
            added.append((call, models, series))
        if maybe:
            return True
        for call, models, series in added:  # after every append: the statistics request_levers will see
            if len(models) >= 2:
                return True  # models to compare
            stats = series.summary()
            if stats is None:
                continue
            median_in, median_out = stats.input_p50, stats.output_p50
            if stats.context_fit is not None and median_in is not None and (call.input_tokens or 0) > median_in:
                return True
            if (
                stats.ms_per_output_token is not None
                and median_out is not None
                and (call.output_tokens or 0) > median_out
            ):
                return True
        return False

    def remember(self, calls: Sequence[Call]) -> None:
        """Remember the identities of ``calls``, for later requests (the oldest are forgotten first)."""
        keys = self._keys
        for call in calls:
            if call.key is not None:
                keys[call.key] = None
        while len(keys) > MAX_KEYS:
            try:
                del keys[next(iter(keys))]
            except (KeyError, RuntimeError, StopIteration):  # another thread got there first
                break

    def stats(self, stage: str, model: str) -> ModelStats | None:
        series = self._series.get(stage, {}).get(model)
        return series.summary() if series is not None else None

    def models(self, stage: str) -> list[tuple[str, ModelStats]]:
        found: list[tuple[str, ModelStats]] = []
        for model, series in list(self._series.get(stage, {}).items()):
            stats = series.summary()
            if stats is not None:
                found.append((model, stats))
        return found

    def model_count(self, stage: str) -> int:
        return len(self._series.get(stage, ()))

    def seen(self, key: int) -> bool:
        return key in self._keys


def add_lever_hints(
    recent: RecentCalls,
    calls: Sequence[Call],
    report: TraceReport,
    names: Mapping[int, str] | None = None,
) -> tuple[Hint, ...]:
    """Remember ``calls`` (a request's, see ``calls_of``); a hint per lever that recent calls give an estimate for.

    ``report`` is the request's judged report; ``names`` (span id -> name) names the
    spans of each hint, as for the other hints.
    """
    if not calls:
        return ()
    maybe = recent.add(calls)  # this trace's own calls count too
    findings = request_levers(calls, report, recent) if maybe else ()
    recent.remember(calls)  # after: "an earlier request" is strictly earlier
    if not findings:
        return ()
    known = names if names is not None else {}
    hints = tuple(
        Hint(
            f.kind,
            f.stage,
            f.spans,
            f.saving_ms,
            f.span_ids[:NAMED_SPANS],
            tuple(known.get(span_id, "") for span_id in f.span_ids[:NAMED_SPANS]),
            f.basis,
        )
        for f in findings
        if f.saving_ms is not None and f.saving_ms > 0
    )
    return hints
