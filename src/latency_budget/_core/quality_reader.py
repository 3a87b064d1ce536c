"""The quality reader: what the telemetry says of each call's answer, and of each model's answers in a stage.

It reads, with the spellings of ``QUALITY_SPELLINGS`` (``_config/genai_defaults.py``):
evaluation results (``gen_ai.evaluation.result``) written as span events on the evaluated
call's span or as log records joined to it by trace and span id, or by
``gen_ai.response.id`` when the record names no span; the decision of a guardrail span of
the request on the answer of the model call it checked (the nearest model call that ended
before the guardrail did); the call span's error status; and its finish reasons (cut at the
length limit, refused by a content filter). What it finds is a
:class:`~latency_budget._core.quality.CallQuality` per call and, summed per stage and
model, a :class:`~latency_budget._core.quality.QualityStats` (:class:`QualityTally`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import StatusCode

from latency_budget._config.genai_defaults import (
    CALL_KEYS,
    CUT_FINISH_REASONS,
    EVALUATION_SPELLINGS,
    GUARDRAIL_SPELLINGS,
    REFUSED_FINISH_REASONS,
    EvaluationSpelling,
)
from latency_budget._core.quality import CallQuality, Evaluation, QualityStats, Scores

__all__ = [
    "EVALUATION_EVENTS",
    "GUARDRAIL_KEYS",
    "MAX_EVALUATION_NAMES",
    "MAX_NAME_CHARS",
    "QUALITY_GATE",
    "RESPONSE_ID_KEYS",
    "Judged",
    "QualityTally",
    "RecordingQuality",
    "SpanQuality",
    "call_quality",
    "evaluation_of",
    "guardrail_decision",
    "joined",
    "judged_answers",
    "response_id",
    "span_quality",
]

MAX_EVALUATION_NAMES = 16  # evaluations kept per stage and model; further names are counted, not kept
MAX_NAME_CHARS = 128  # an evaluation's name is cut to this many characters

_BY_EVENT: Mapping[str, tuple[EvaluationSpelling, ...]] = {
    event: tuple(s for s in EVALUATION_SPELLINGS if s.event == event)
    for event in {s.event for s in EVALUATION_SPELLINGS}
}
EVALUATION_EVENTS: frozenset[str] = frozenset(_BY_EVENT)
GUARDRAIL_KEYS: frozenset[str] = frozenset(s.key for s in GUARDRAIL_SPELLINGS)
RESPONSE_ID_KEYS: tuple[str, ...] = tuple(
    dict.fromkeys(s.response_id_key for s in EVALUATION_SPELLINGS if s.response_id_key is not None)
)
# A span with none of these keys is no model call and no guardrail decision: not read (one set operation).
QUALITY_GATE: frozenset[str] = frozenset((*CALL_KEYS.model, *GUARDRAIL_KEYS))
_FINISH_KEYS = CALL_KEYS.finish_reasons
_QUALITY_REASONS = CUT_FINISH_REASONS | REFUSED_FINISH_REASONS
_NO_FINISH = frozenset(_FINISH_KEYS).isdisjoint
_FIRST_FINISH, _OTHER_FINISH = _FINISH_KEYS[0], _FINISH_KEYS[1:]
_GUARDRAIL_KEY_LIST = tuple(GUARDRAIL_KEYS)
_ERROR = StatusCode.ERROR


class _Event(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, object] | None: ...


def evaluation_of(event: str, attributes: Mapping[str, object]) -> tuple[Evaluation, str | None] | None:
    """The evaluation an event (span event or log record) of name ``event`` holds, and the response id it names.

    ``None`` when it is no evaluation result, names no evaluation, holds neither a score
    nor a label, or says that the evaluation itself failed (``error.type``).
    """
    for spelling in _BY_EVENT.get(event, ()):
        name = attributes.get(spelling.name_key)
        if name.__class__ is not str or not name:
            continue
        if spelling.error_key is not None and attributes.get(spelling.error_key) is not None:
            return None  # the evaluator failed: nothing is known of the answer
        score = _number(attributes.get(spelling.score_key))
        label = attributes.get(spelling.label_key) if spelling.label_key is not None else None
        label = label if label.__class__ is str and label else None
        if score is None and label is None:
            return None
        response = attributes.get(spelling.response_id_key) if spelling.response_id_key is not None else None
        return (
            Evaluation(name[:MAX_NAME_CHARS], score, label),
            response if response.__class__ is str and response else None,
        )
    return None


def _number(value: object) -> float | None:
    if value.__class__ is float:
        return value if math.isfinite(value) else None
    if value.__class__ is int:
        return float(value)
    return None


def guardrail_decision(attributes: Mapping[str, object]) -> bool | None:
    """Whether a guardrail span flagged (``True``) or passed (``False``) an answer; ``None``: no decision on one."""
    for spelling in GUARDRAIL_SPELLINGS:
        value = attributes.get(spelling.key)
        if value.__class__ is not str:
            continue
        if spelling.target_key is not None:
            target = attributes.get(spelling.target_key)
            if target is not None and target not in spelling.answer_targets:
                continue  # it checked a prompt or a tool call, not an answer
        if value in spelling.flagged:
            return True
        if value in spelling.passed:
            return False
    return None


def _finish(attributes: Mapping[str, object]) -> tuple[bool, bool]:
    """(cut, refused) from the call's finish reasons (a sequence, or a JSON array in a string as Jaeger keeps it)."""
    for key in _FINISH_KEYS:
        reasons = attributes.get(key)
        if reasons is None:
            continue
        if reasons.__class__ is tuple and _QUALITY_REASONS.isdisjoint(reasons):
            return False, False  # the common case (a live span's ("stop",)): one set operation
        if isinstance(reasons, str):
            found = [reason for reason in _QUALITY_REASONS if f'"{reason}"' in reasons or reason == reasons]
        elif isinstance(reasons, (tuple, list)):
            found = [reason for reason in reasons if reason in _QUALITY_REASONS]
        else:
            continue
        return (
            any(reason in CUT_FINISH_REASONS for reason in found),
            any(reason in REFUSED_FINISH_REASONS for reason in found),
        )
    return False, False


def call_quality(
    attributes: Mapping[str, object], events: Iterable[_Event] = (), *, error: bool = False
) -> CallQuality | None:
    """What a model call's own span says of its answer: evaluation events, error, finish reasons (``None``: nothing)."""
    evaluations = []
    for event in events:  # most call spans have none, or a few of other names
        if event.name in EVALUATION_EVENTS:
            found = evaluation_of(event.name, event.attributes or {})
            if found is not None:
                evaluations.append(found[0])
    cut, refused = _finish(attributes) if not _NO_FINISH(attributes) else (False, False)
    if not evaluations and not error and not cut and not refused:
        return None
    return CallQuality(tuple(evaluations), error, None, cut, refused)


# What a request's stage spans said of quality (TraceState.quality): model calls' CallQuality by
# span id, and the guardrail decisions on answers as (start ns, end ns, flagged).
SpanQuality = tuple[dict[int, CallQuality], list[tuple[int, int, bool]]]


def span_quality(
    found: SpanQuality | None,
    span_id: int,
    start: int,
    end: int,
    attributes: Mapping[str, object],
    read_events: Callable[[Any], Iterable[_Event]],
    source: object,
) -> SpanQuality | None:
    """``found`` with what one ended stage span says of quality: a guardrail's decision, or a model call's
    evaluation events, ERROR status and finish reasons (``source`` is the span, its events read by
    ``read_events``: an SDK span live, a recorded span in replay). Made when something is found."""
    get = attributes.get
    for key in _GUARDRAIL_KEY_LIST:  # a few lookups: cheaper than a set operation on a call's attributes
        if get(key) is not None:
            decision = guardrail_decision(attributes)
            if decision is not None:
                if found is None:
                    found = ({}, [])
                found[1].append((start, end, decision))
                return found
            break
    events = read_events(source)
    error = _errored(source)
    if not events and not error and _plain_finish(get):
        return found  # the common case: a model call that says nothing of its answer
    quality = call_quality(attributes, events, error=error)
    if quality is None:
        return found
    if found is None:
        found = ({}, [])
    found[0][span_id] = quality
    return found


def _errored(source: Any) -> bool:
    """Whether a span's status is ERROR: an SDK span's ``status``, a recorded span's ``error``."""
    try:
        return source.status.status_code is _ERROR
    except AttributeError:
        return getattr(source, "error", False) is True


def _plain_finish(get: Callable[[str], object]) -> bool:
    """Whether the finish reasons say nothing of quality (the first spelling, a tuple, holds none of them)."""
    reasons = get(_FIRST_FINISH)
    if reasons is None:
        return all(get(key) is None for key in _OTHER_FINISH)
    return reasons.__class__ is tuple and _QUALITY_REASONS.isdisjoint(reasons)


def response_id(attributes: Mapping[str, object]) -> str | None:
    """The id of the answer a call span records (``gen_ai.response.id``), joining evaluations that name no span."""
    for key in RESPONSE_ID_KEYS:
        found = attributes.get(key)
        if found.__class__ is str and found:
            return found
    return None


def joined(
    quality: CallQuality | None, evaluations: Sequence[Evaluation] = (), blocked: bool | None = None
) -> CallQuality | None:
    """``quality`` with more evaluations and a guardrail's judgement (several judgements: flagged by any)."""
    if not evaluations and blocked is None:
        return quality
    if quality is None:
        return CallQuality(tuple(evaluations), blocked=blocked)
    if blocked is not None and quality.blocked is not None:
        blocked = blocked or quality.blocked
    elif blocked is None:
        blocked = quality.blocked
    return CallQuality((*quality.evaluations, *evaluations), quality.error, blocked, quality.cut, quality.refused)


class Judged(Protocol):
    """What :func:`judged_answers` reads of a call: a :class:`~latency_budget._core.call_facts.Call`'s fields."""

    @property
    def span_id(self) -> int: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def model(self) -> str | None: ...
    @property
    def generation(self) -> bool: ...


def judged_answers(guardrails: Iterable[tuple[int, int, bool]], calls: Sequence[Judged]) -> dict[int, bool]:
    """Which model calls' answers the request's guardrails judged: span id -> flagged (by any of them).

    ``guardrails`` are ``(start ns, end ns, flagged)`` of the guardrail spans with a decision
    on an answer; each judged the generation call (else any model call) of ``calls`` that
    ended last at or before the guardrail ended, and started before it did.
    """
    found: dict[int, bool] = {}
    models = [c for c in calls if c.model is not None]
    generations = [c for c in models if c.generation] or models
    for start, end, flagged in guardrails:
        best: Judged | None = None
        for call in generations:
            if call.end_ns <= end and call.start_ns <= start and (best is None or call.end_ns > best.end_ns):
                best = call
        if best is not None:
            found[best.span_id] = found.get(best.span_id, False) or flagged
    return found


@dataclass(slots=True)
class QualityTally:
    """Running quality figures of one model's calls in one stage, bounded (no list of calls)."""

    calls: int = 0
    evaluations: dict[str, Scores] = field(default_factory=dict)
    errors: int = 0
    guarded: int = 0
    blocked: int = 0
    cut: int = 0
    refused: int = 0
    evidence: int = 0  # calls with any CallQuality
    unkept: int = 0  # scores of evaluations past MAX_EVALUATION_NAMES

    def add(self, quality: CallQuality | None, calls: int = 1) -> None:
        """Count ``calls`` more calls, one of them (if any) with ``quality``."""
        self.calls += calls
        if quality is None:
            return
        self.evidence += 1
        self.add_evaluations(quality.evaluations)
        self.errors += quality.error
        self.cut += quality.cut
        self.refused += quality.refused
        if quality.blocked is not None:
            self.guarded += 1
            self.blocked += quality.blocked

    def add_evaluations(self, evaluations: Iterable[Evaluation]) -> None:
        """Add evaluation scores of calls already counted (an evaluation that arrived after its call)."""
        kept = self.evaluations
        for evaluation in evaluations:
            if evaluation.score is None:
                continue
            scores = kept.get(evaluation.name)
            if scores is None:
                if len(kept) >= MAX_EVALUATION_NAMES:
                    self.unkept += 1
                    continue
                scores = Scores()
            kept[evaluation.name] = scores.add(evaluation.score)
            self.evidence = max(self.evidence, 1)

    def stats(self, calls: int | None = None) -> QualityStats | None:
        """The figures (of ``calls`` calls, when the calls are counted elsewhere); ``None`` when no call had
        any evidence (evaluation, judgement, error, finish reason)."""
        calls = self.calls if calls is None else calls
        if not self.evidence or not calls:
            return None
        return QualityStats(
            calls,
            dict(self.evaluations),
            self.errors,
            self.guarded,
            self.blocked,
            self.cut,
            self.refused,
        )


class _Call(Judged, Protocol):
    quality: CallQuality | None


class RecordingQuality:
    """The quality of a recording's calls (the CLI's): read trace by trace as they are judged, evaluation log
    records joined at the end, whichever came first.

    Holds a reference to each model call read (the reports hold them anyway) and the
    evaluations of log records until :meth:`join`; ``unjoined`` counts the results that
    named no call of the recording (by trace and span id, or, naming no span, by response id).
    """

    def __init__(self) -> None:
        self._by_span: dict[tuple[int, int], _Call] = {}
        self._by_response: dict[str, _Call] = {}
        self._pending: list[tuple[int | None, int | None, str | None, Evaluation]] = []
        self.records = 0  # evaluation results read from log records
        self.unjoined = 0  # of those, the ones naming no call read

    def read_request(
        self,
        trace_id: int,
        calls: Sequence[_Call],
        found: SpanQuality | None,
        attributes: Mapping[int, Mapping[str, object]],
    ) -> None:
        """Set the quality of a judged request's ``calls`` from what its stage spans said (``found``,
        ``TraceState.quality``); ``attributes`` (the stage spans' by span id) give the response ids."""
        qualities, guardrails = found if found is not None else ({}, [])
        judged = judged_answers(guardrails, calls) if guardrails else {}
        for call in calls:
            if call.model is None:
                continue
            call.quality = joined(qualities.get(call.span_id), blocked=judged.get(call.span_id))
            self._by_span[(trace_id, call.span_id)] = call
            response = response_id(attributes.get(call.span_id, {}))
            if response is not None:
                self._by_response.setdefault(response, call)

    def add_log_record(
        self, event: str, attributes: Mapping[str, object], trace_id: int | None, span_id: int | None
    ) -> None:
        """Keep the evaluation result a log record holds (any other record is ignored), to join at the end."""
        found = evaluation_of(event, attributes)
        if found is None:
            return
        evaluation, response = found
        self.records += 1
        self._pending.append((trace_id, span_id, response, evaluation))

    def join(self) -> None:
        """Join the kept evaluations to their calls: by trace and span id, else (no span id) by response id."""
        pending, self._pending = self._pending, []
        for trace_id, span_id, response, evaluation in pending:
            call = None
            if trace_id is not None and span_id is not None:
                call = self._by_span.get((trace_id, span_id))
            elif response is not None:
                call = self._by_response.get(response)
            if call is None:
                self.unjoined += 1
                continue
            call.quality = joined(call.quality, (evaluation,))
