"""What the processor remembers of recent calls, so that one trace's lever hints rest on many.

A trace alone rarely says how fast another model would have been, or how latency grows
with context: the last :data:`WINDOW` calls of each model in each stage do. The memory is
bounded (at most :data:`MAX_SERIES` stage-and-model pairs, :data:`MAX_KEYS` call
identities, kept as hashes). A series' statistics are recomputed when asked for after new
calls: after every call for its first :data:`EXACT_UP_TO` calls, then each time its count
doubles, then every :data:`REFRESH` calls (so the statistics describe the last
:data:`WINDOW` calls as of at most that many calls ago), and each fit uses at most
:data:`FIT_POINTS` points, so a root's end rarely pays for one.

Whether the data supports a fit (of latency on tokens, or the rank test of the per-token
rate) is tested rarely: once the series' window is full, then every :data:`RETEST` calls,
each time at half the level of the time before (1.25%, 0.625%, ...: 2.5% over a series'
life), :data:`MAX_DECISIONS` times at most. Between tests a fit that passed must pass again
at each refresh, on that refresh's window and at the same level, or it is off until the
next test; one that failed stays off. On traffic where time does not grow with tokens the
processor thus gives no more such estimates than ``report`` does, and a fit that passed
by chance gives them for one refresh at most.

Roots end on many threads. Appending to a ``deque`` and reading or writing one dict key
are atomic in CPython, and a snapshot of a deque is taken in one C-level call, so no lock
is needed: a race can only make an estimate one call staler.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from latency_budget import _guard
from latency_budget._config.model import BudgetSet, QualityPolicy
from latency_budget._core.call_facts import Call, RecordedCalls, Sample, sample_of
from latency_budget._core.estimators import z_for
from latency_budget._core.hints import NAMED_SPANS, Hint
from latency_budget._core.levers import (
    FitName,
    ModelStats,
    Result,
    merged_result,
    passed_fits,
    request_levers,
    summarise,
)
from latency_budget._core.levers.weigh import Outcome, outcome_of, weigh_groups
from latency_budget._core.quality import Evaluation, QualityStats, Scores
from latency_budget._core.quality_reader import QualityTally, SpanQuality, joined, judged_answers, response_id
from latency_budget._core.report import TraceReport

__all__ = [
    "EXACT_UP_TO",
    "FIT_POINTS",
    "MAX_DECISIONS",
    "MAX_KEYS",
    "MAX_NAME_CHARS",
    "MAX_SERIES",
    "MIN_MODEL_CALLS_IN_PROCESS",
    "REFRESH",
    "RETEST",
    "WINDOW",
    "WINDOW_BYTES",
    "RecentCalls",
]

WINDOW = 64  # calls remembered per model and stage
RETEST = 16 * WINDOW  # calls between two tests of a series' fits (the first when its window is full)
# Tests of a series' fits, at most: the 40th is at 0.025 / 2^40, about z = 7.6. Past about 49
# the level no longer differs from 0 in a float (and past 1,023 2^n overflows one), so the
# fits the last test supported are kept from then on.
MAX_DECISIONS = 40
EXACT_UP_TO = 16  # statistics are recomputed after every call until a series has had this many
REFRESH = 2 * WINDOW  # ... and then at most every this many calls
# Calls of each model before the processor compares two (a full window): the medians of a
# young series wander, and a model-choice hint on them differed from report's on the same
# calls by 15% (see the README's tolerance, tests/unit/test_lever_confounders.py).
MIN_MODEL_CALLS_IN_PROCESS = WINDOW
FIT_POINTS = 32  # points per fit (thinned evenly from the window): 496 pairs, not 2016
MAX_SERIES = 32  # stage-and-model pairs remembered; calls of further pairs are not
MAX_KEYS = 4096  # identities of recent calls, for the cache lever across requests
MAX_NAME_CHARS = 128  # a kept model name is cut to this many characters
MAX_PENDING = 1024  # evaluation results kept while their call's request has not ended
# What the kept calls may hold at most, in bytes (CPython): per call (a Sample) its tuple
# and up to three names of MAX_NAME_CHARS characters of up to 4 bytes (a Sample keeps
# two, its model and target, one string when not cut); per series its key; the identities.
_CALL_BYTES = 200 + 3 * (80 + 4 * MAX_NAME_CHARS)
WINDOW_BYTES = MAX_SERIES * (WINDOW * _CALL_BYTES + 80 + 4 * MAX_NAME_CHARS + 1024) + MAX_KEYS * 120


_NEVER = 2**63  # a watch no count reaches (the series' tests are over)


def _decision_z(decision: int) -> float:
    """The level of a series' ``decision``-th test of its fits: 2.5% / 2^decision, one-sided.

    The levels add up to 2.5% at most over a series' life, so a model whose time does not
    grow with its tokens gets a fit in no more series than one test at 2.5% would give.
    """
    return z_for(0.025 / 2**decision)


class _Series:
    """The recent calls of one model in one stage, and their statistics."""

    __slots__ = ("added", "calls", "decide_at", "decisions", "due", "passed", "shared", "stats", "watch")

    def __init__(self) -> None:
        self.calls: deque[Sample] = deque(maxlen=WINDOW)
        self.shared = False  # its stage has calls of another model too (set when the second model comes)
        self.added = 0
        self.due = 1
        self.stats: ModelStats | None = None
        self.decide_at = WINDOW  # when its fits are next tested
        self.decisions = 0
        self.passed: frozenset[FitName] = frozenset()  # the fits the last test supported
        # From which count RecentCalls.add looks closer at this series' calls (see rewatch).
        self.watch = WINDOW

    def rewatch(self) -> None:
        """Set ``watch`` from the rest: every call when its stage is shared or a fit passed, else its next test.

        So that the quick test reads one attribute per call of most series; called wherever
        ``shared``, ``passed``, ``decide_at`` or ``decisions`` change.
        """
        if self.shared or self.passed:
            self.watch = 0
        else:
            self.watch = self.decide_at if self.decisions < MAX_DECISIONS else _NEVER

    def summary(self) -> ModelStats | None:
        added = self.added
        if added >= self.due:
            snapshot = list(self.calls)
            if snapshot and added >= self.decide_at and self.decisions < MAX_DECISIONS:
                # Test the fits on the whole window, rarely: a fit re-tested at every refresh
                # of overlapping windows would pass by chance far more often than once.
                self.decisions += 1
                self.decide_at = added + RETEST
                stats = summarise(snapshot, max_fit_points=WINDOW, z=_decision_z(self.decisions))
                self.passed = passed_fits(stats)
                self.stats = stats
            elif snapshot and self.passed:
                # Between tests, a fit that passed must hold again on each refresh's window (after
                # the doubling, disjoint from the one before), at the level of the test it passed:
                # a fit that passed by chance stops at the next refresh instead of lingering until
                # the next test. One that fails stays off until then, as the others do.
                stats = summarise(snapshot, max_fit_points=WINDOW, z=_decision_z(self.decisions), fits=self.passed)
                self.passed = passed_fits(stats)
                self.stats = stats
            elif snapshot:
                self.stats = summarise(snapshot, max_fit_points=FIT_POINTS, z=0.0, fits=self.passed)
            # After every call up to EXACT_UP_TO calls, then each time they double, then every REFRESH.
            self.due = added + 1 if added < EXACT_UP_TO else min(2 * added, added + REFRESH)
            self.rewatch()
        return self.stats


class RecentCalls:
    """A :class:`~latency_budget._core.levers.Baseline` over the calls of recent traces.

    Bounded in bytes, whatever the spans carry: at most :data:`WINDOW_BYTES`. It keeps a
    :class:`~latency_budget._core.call_facts.Sample` of each call (no response model,
    provider or arguments), whose model name is cut to :data:`MAX_NAME_CHARS` characters;
    ``cut`` counts the calls whose names were cut.
    """

    def __init__(self, on_error: Callable[[Exception], object] | None = None) -> None:
        self._series: dict[str, dict[str, _Series]] = {}  # stage -> model -> series
        self._count = 0
        self.min_model_calls = MIN_MODEL_CALLS_IN_PROCESS
        self._keys: dict[int, Result] = {}  # identity -> what its calls returned (see merged_result), oldest first
        self.cut = 0
        self._on_error = on_error  # told of an estimate that failed (lever_hints never raises)
        # (stage, model) -> what the calls' spans said of their answers (add_quality), per series.
        self._quality: dict[tuple[str, str], QualityTally] = {}
        # stage -> the success of requests within its max_calls and past it (add_loops).
        self._loops: dict[str, _LoopTally] = {}
        # Evaluation log records (EvaluationLogProcessor), when joined: the recent model calls by
        # (trace id, span id) and by response id (at most MAX_KEYS each, the oldest go first),
        # and the results that came before their call's request ended (at most MAX_PENDING).
        self._joins = False
        self._by_span: dict[tuple[int, int], tuple[str, str]] = {}
        self._by_response: dict[str, tuple[str, str]] = {}
        self._pending: dict[tuple[int, int] | str, list[Evaluation]] = {}
        self.unjoined = 0  # evaluation results that found no recent call

    def lever_hints(
        self,
        names: Mapping[int, str],
        budgets: BudgetSet,
        calls: Sequence[Call],
        report: TraceReport,
        quality: SpanQuality | None = None,
    ) -> tuple[Hint, ...]:
        """Remember ``calls`` (a request's, see ``RecordedCalls``); the report's hints with one more per lever
        recent calls give an estimate for.

        ``names`` (span id -> name) names the spans of each hint, as for the other hints;
        ``budgets`` (the request's profile) gives ``hints.min_saving_ms``; ``report`` is
        the request's judged report. Bound to a root with ``partial``, this is the
        ``levers`` that ``evaluate`` calls, one Python frame (under callgrind a call through
        ``partial`` is about 800 instructions, at every root's end). It returns
        ``report.hints`` itself when it changes nothing. An ``iterations`` hint is left out
        where the recent requests within the stage's ``max_calls`` are shown to succeed
        less than those past it (:meth:`add_loops`). It never raises: an estimate that
        fails goes to ``on_error`` and gives no hint, and the verdict stands.
        """
        shape = report.hints
        try:
            if budgets.limited:  # stages with a max_calls: this request's success, by its loops
                shape = self.add_loops(budgets, report, quality)
            # A processor's calls are read from the spans only when request_levers needs them.
            samples = calls.samples if type(calls) is RecordedCalls else [sample_of(c) for c in calls]
            maybe = self.add(samples)  # this trace's own calls count too (none: False)
            if quality is not None:  # what the request's spans said of answers (TraceState.quality)
                self.add_quality(calls, quality)
            if self._joins and samples:  # evaluation log records may name these calls
                self._known(report.trace_id or 0, calls)
            if not maybe:
                return shape  # and none has an identity to remember (add says True for any)
            findings = request_levers(
                calls,
                report,
                self,
                min_saving_ms=budgets.min_saving_ms,
                protected=budgets.protected_stages,
                quality=budgets.quality,
            )
            self.remember(samples)  # after: "an earlier request" is strictly earlier
            if not findings:
                return shape
            found = tuple(
                Hint(
                    f.kind,
                    f.stage,
                    f.spans,
                    f.saving_ms,
                    f.span_ids[:NAMED_SPANS],
                    tuple(names.get(span_id, "") for span_id in f.span_ids[:NAMED_SPANS]),
                    f.basis,
                    f.rests_on,
                )
                for f in findings
                if f.saving_ms is not None and f.saving_ms > 0
            )
            return shape + found if found else shape
        except Exception as exc:
            if self._on_error is not None:
                self._on_error(exc)
            return report.hints

    def add_loops(self, budgets: BudgetSet, report: TraceReport, quality: SpanQuality | None) -> tuple[Hint, ...]:
        """Count the request's success with its stages' calls within ``max_calls`` or past it; its hints, less an
        ``iterations`` hint that the requests within the limit, shown to succeed less, speak against.

        Success is what the spans said at the root's end (``quality``): no call in error,
        refused or blocked by a guardrail; running counts per stage since the start, with
        each evaluation's per-request mean (at most :data:`MAX_LOOP_EVALUATIONS` names).
        """
        outcome: Outcome | None = None
        stages = report.stages
        for index, limit in budgets.limited:
            if index >= len(stages):
                continue
            stage = stages[index]
            if not stage.count:
                continue
            if outcome is None:
                outcome = _outcome_of(quality)
            tally = self._loops.get(stage.stage)
            if tally is None:
                tally = self._loops.setdefault(stage.stage, _LoopTally())
            tally.add(outcome, past=stage.count > limit)
        hints = report.hints
        if not any(hint.kind == "iterations" for hint in hints):
            return hints
        kept = tuple(
            hint
            for hint in hints
            if hint.kind != "iterations"
            or (tally := self._loops.get(hint.stage)) is None
            or not tally.speaks_against(budgets.quality)
        )
        return kept if len(kept) < len(hints) else hints

    def add(self, samples: Sequence[Sample]) -> bool:
        """Remember the model calls among ``samples`` (``sample_of`` makes one of a ``Call``).

        ``False`` means that :func:`~latency_budget._core.levers.request_levers` would
        find nothing (a cheap test on what the recent calls say, so that most roots skip
        it); ``True`` only that it may find something.
        """
        maybe = False
        pending: list[tuple[Sample, _Series]] | None = None  # calls whose series has fits to compare them with
        series_of = self._series
        for sample in samples:
            stage, model, _, _, _, _, _, generation, streamed, to_tools, key, _, _, _ = sample
            if key is not None:
                maybe = True
            if model is None:
                continue
            if generation and not streamed and not to_tools:
                maybe = True  # a streaming candidate
            try:  # subscripts, not get(): under callgrind, about 270 instructions fewer a call
                series = series_of[stage][model]
            except KeyError:  # a new series, or a name to cut (rare)
                found = self._series_for(sample)
                if found is None:
                    continue
                sample, series = found  # noqa: PLW2901  # the sample kept, its names cut
            series.calls.append(sample)
            series.added = added = series.added + 1
            # Tested after each append, so the last of a stage's calls sees all of them (a
            # stage's models and a series' count only grow): what request_levers will see.
            # Below its watch, no fit passed its last test and none is due for one: no token
            # lever applies, whatever the medians (refreshed when request_levers asks).
            if added >= series.watch:
                if series.shared:
                    maybe = True  # models to compare
                elif series.passed:
                    if pending is None:
                        pending = []
                    pending.append((sample, series))
                elif added >= series.decide_at and series.decisions < MAX_DECISIONS:
                    maybe = True  # its fits are due for a test, which request_levers' reading runs
        if maybe or pending is None:
            return maybe
        for sample, series in pending:
            stats = series.summary() if series.added >= series.due else series.stats
            if stats is None:
                continue
            if stats.context_fit is not None and stats.input_p50 is not None and (sample[5] or 0) > stats.input_p50:
                return True
            rate, median_out = stats.ms_per_output_token, stats.output_p50
            if rate is not None and median_out is not None and (sample[6] or 0) > median_out:
                return True
            usual = stats.reasoning_p50
            if rate is not None and usual is not None and (sample[13] or 0) > usual:
                return True
        return False

    def add_quality(self, calls: Sequence[Call], found: SpanQuality) -> None:
        """Count what a request's spans said of its model calls' answers (after :meth:`add` counted the calls).

        Each call's ``quality`` is set; the figures are kept per series as running figures
        (:class:`QualityTally`: no list of calls), for the stage-and-model pairs that have a
        series, so bounded as the series are.
        """
        qualities, guardrails = found
        judged = judged_answers(guardrails, calls) if guardrails else {}
        for call in calls:
            model = call.model
            if model is None:
                continue
            quality = joined(qualities.get(call.span_id), blocked=judged.get(call.span_id))
            if quality is None:
                continue
            call.quality = quality  # the request's own levers read it too (the calls are built once)
            model = _cut(model) or ""
            if model not in self._series.get(call.stage, {}):
                continue  # past MAX_SERIES: not kept
            self._tally((call.stage, model)).add(quality, calls=0)  # the series count the calls

    def join_evaluations(self) -> None:
        """From now on, remember the recent model calls' ids, for :meth:`add_evaluation`."""
        self._joins = True

    def add_evaluation(
        self, trace_id: int | None, span_id: int | None, response: str | None, evaluation: Evaluation
    ) -> None:
        """Count an evaluation result of a recent call: by trace and span id, else by response id.

        A result whose call's request has not ended yet waits for it (at most
        :data:`MAX_PENDING`; past that, the oldest is dropped and counted in ``unjoined``).
        """
        key: tuple[int, int] | str
        if trace_id and span_id:
            key = (trace_id, span_id)
            target = self._by_span.get(key)
        elif response:
            key = response
            target = self._by_response.get(key)
        else:
            self.unjoined += 1
            return
        if target is not None:
            self._tally(target).add_evaluations((evaluation,))
            return
        pending = self._pending
        pending.setdefault(key, []).append(evaluation)
        while len(pending) > MAX_PENDING:
            try:
                dropped = pending.pop(next(iter(pending)))
            except (KeyError, RuntimeError, StopIteration):  # another thread got there first
                break
            self.unjoined += len(dropped)

    def _known(self, trace_id: int, calls: Sequence[Call]) -> None:
        """Remember a request's model calls for evaluation results to come, and count those that came first."""
        raw = calls._raw if type(calls) is RecordedCalls else ()
        attributes = {item[0]: item[5] for item in raw}
        for call in calls:
            if call.model is None:
                continue
            model = _cut(call.model) or ""
            if model not in self._series.get(call.stage, {}):
                continue  # past MAX_SERIES: not kept
            target = (call.stage, model)
            keys: list[tuple[int, int] | str] = [(trace_id, call.span_id)]
            self._by_span[(trace_id, call.span_id)] = target
            response = response_id(attributes.get(call.span_id, {}))
            if response is not None:
                self._by_response[response] = target
                keys.append(response)
            for key in keys:
                waiting = self._pending.pop(key, None)
                if waiting:
                    self._tally(target).add_evaluations(waiting)
        for kept in (self._by_span, self._by_response):
            while len(kept) > MAX_KEYS:
                try:
                    del kept[next(iter(kept))]  # type: ignore[arg-type]
                except (KeyError, RuntimeError, StopIteration):
                    break

    def _tally(self, key: tuple[str, str]) -> QualityTally:
        tally = self._quality.get(key)
        if tally is None:
            tally = self._quality.setdefault(key, QualityTally())
        return tally

    def _series_for(self, sample: Sample) -> tuple[Sample, _Series] | None:
        """The sample to keep (its names cut) and its series, made if new; ``None`` past MAX_SERIES."""
        sample = self._kept(sample)
        stage, model = sample[0], sample[1] or ""
        models = self._series.get(stage)
        if models is None:
            models = self._series.setdefault(stage, {})
        series = models.get(model)
        if series is None:
            if self._count >= MAX_SERIES:
                return None
            self._count += 1
            series = models.setdefault(model, _Series())
            if len(models) >= 2:
                for other in list(models.values()):
                    other.shared = True
                    other.rewatch()
        return sample, series

    def _kept(self, sample: Sample) -> Sample:
        """The sample to keep, its names at most MAX_NAME_CHARS long (a cut is logged once, counted)."""
        model, target = sample[1], sample[11]
        if (model is None or len(model) <= MAX_NAME_CHARS) and (target is None or len(target) <= MAX_NAME_CHARS):
            return sample
        self.cut += 1
        if self.cut == 1:
            _guard.log_once(
                ("recent-calls", "cut"),
                logging.WARNING,
                "latency_budget: a model name longer than %d characters was cut "
                "to that length for the lever estimates (further cuts are counted, not logged)",
                MAX_NAME_CHARS,
            )
        kept = _cut(model)
        return (sample[0], kept, *sample[2:11], kept if target is model else _cut(target), *sample[12:])

    def remember(self, samples: Sequence[Sample]) -> None:
        """Remember the identities of ``samples`` and what they returned, for later requests (the oldest go first)."""
        keys = self._keys
        for sample in samples:
            key = sample[10]
            if key is not None:
                result = sample[12]
                keys[key] = merged_result(keys.get(key), result) if result is not None else keys.get(key)
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

    def result(self, key: int) -> Result:
        return self._keys.get(key)

    def quality(self, stage: str, model: str) -> QualityStats | None:
        tally = self._quality.get((stage, model))
        series = self._series.get(stage, {}).get(model)
        if tally is None or series is None:
            return None
        return tally.stats(calls=series.added)


MAX_LOOP_EVALUATIONS = 8  # evaluation names whose per-request scores a stage's loop tally keeps


class _LoopTally:
    """Requests of one stage within its ``max_calls`` (``fewer``) and past it (``more``): succeeded, of, scores."""

    __slots__ = ("evidence", "fewer", "fewer_scores", "more", "more_scores")

    def __init__(self) -> None:
        self.fewer = [0, 0]
        self.more = [0, 0]
        self.fewer_scores: dict[str, Scores] = {}
        self.more_scores: dict[str, Scores] = {}
        self.evidence = False

    def add(self, outcome: Outcome, *, past: bool) -> None:
        counts, scores = (self.more, self.more_scores) if past else (self.fewer, self.fewer_scores)
        counts[0] += outcome.succeeded
        counts[1] += 1
        if outcome.evidence:
            self.evidence = True
        for name, value in outcome.scores:
            found = scores.get(name)
            if found is None:
                if len(scores) >= MAX_LOOP_EVALUATIONS:
                    continue
                found = Scores()
            scores[name] = found.add(value)

    def speaks_against(self, policy: QualityPolicy) -> bool:
        """Whether the requests within the limit are not shown to succeed as often (compared, and failed)."""
        weighed = weigh_groups(
            (self.fewer[0], self.fewer[1]), (self.more[0], self.more[1]), self.fewer_scores, self.more_scores, policy
        )
        return weighed.known and not weighed.passed


def _outcome_of(quality: SpanQuality | None) -> Outcome:
    """A request's outcome from what its spans said at the root's end."""
    if quality is None:
        return _SUCCEEDED
    qualities, guardrails = quality
    return outcome_of(qualities.values(), guardrails=(flagged for _, _, flagged in guardrails))


_SUCCEEDED = Outcome(True)


def _cut(name: str | None) -> str | None:
    return name[:MAX_NAME_CHARS] if name is not None and len(name) > MAX_NAME_CHARS else name
