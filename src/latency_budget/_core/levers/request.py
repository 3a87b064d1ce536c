"""The estimated levers of one request: each lever of the table, in its order, where it can apply."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING

from latency_budget._config.model import DEFAULT_MIN_SAVING_MS, DEFAULT_QUALITY, QualityPolicy
from latency_budget._core.levers.table import LEVERS, REQUEST_FINDERS, STAGE_FINDERS
from latency_budget._core.levers.weigh import has_evidence

if TYPE_CHECKING:
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ModelStats
    from latency_budget._core.levers.finding import Finding
    from latency_budget._core.report import TraceReport

__all__ = ["request_levers"]


def request_levers(
    calls: Sequence[Call],
    report: TraceReport,
    baseline: Baseline,
    *,
    min_saving_ms: float = DEFAULT_MIN_SAVING_MS,
    left_out: list[Finding] | None = None,
    protected: AbstractSet[str] | None = None,
    quality: QualityPolicy = DEFAULT_QUALITY,
) -> list[Finding]:
    """The levers that apply to one request: its calls (start order) and its report, against ``baseline``.

    A finding whose estimated saving is below ``min_saving_ms`` (the profile's
    ``hints.min_saving_ms``) is left out, and appended to ``left_out`` when given.
    A finding without an estimate (``saving_ms`` ``None``) is kept. No lever reads the
    calls of a ``protected`` stage (by default, the stages of ``report.protected_spans``),
    and none claims a saving its check would have to pass (see ``Finding.held_back_by``).
    A lever that changes answers weighs its saving against ``quality`` (the budget file's
    ``quality`` section) where it can (``model_choice``), and is marked ``unweighed`` where
    no quality data exists for the models it concerns.
    """
    if protected is None:
        protected = {stage for stage, _, _ in report.protected_spans}
    found = _findings(calls, report, baseline, frozenset(protected), quality)
    if found:
        found = [_caveated(f, baseline) for f in found]
    kept = [f for f in found if f.saving_ms is None or f.saving_ms >= min_saving_ms]
    if left_out is not None and len(kept) < len(found):
        left_out.extend(f for f in found if f.saving_ms is not None and f.saving_ms < min_saving_ms)
    return kept


def _caveated(finding: Finding, baseline: Baseline) -> Finding:
    """``finding``, marked ``unweighed`` when its lever changes answers and none of its models has quality data."""
    if finding.unweighed or finding.trade is not None or not LEVERS[finding.kind].changes_answers:
        return finding
    if finding.kind == "model_choice":  # weighs itself (and says where it could not)
        return finding
    if any(has_evidence(baseline.quality(finding.stage, model)) for model in finding.targets):
        return finding
    return replace(finding, unweighed=True)


def _findings(
    calls: Sequence[Call], report: TraceReport, baseline: Baseline, protected: frozenset[str], quality: QualityPolicy
) -> list[Finding]:
    # Only stages with a model call or a call with arguments can have a lever: most spans of
    # most stages have neither, and a root's end should not pay for them.
    by_stage: dict[str, list[Call]] = {}
    # stage -> (has a model call, has a call with arguments, has a call with reasoning tokens)
    relevant: dict[str, tuple[bool, bool, bool]] = {}
    streamable = False
    for call in calls:
        members = by_stage.get(call.stage)
        if members is None:
            members = by_stage[call.stage] = []
        members.append(call)
        if (call.model is not None or call.key is not None) and call.stage not in protected:
            modelled, keyed, reasoned = relevant.get(call.stage, (False, False, False))
            relevant[call.stage] = (
                modelled or call.model is not None,
                keyed or call.key is not None,
                reasoned or bool(call.reasoning_tokens),
            )
            streamable = streamable or (call.generation and not call.streamed and not call.to_tools)
    if not relevant:
        return []
    limits: dict[str, tuple[float, float]] = {}  # stage -> (its time, the most a total-time lever may save)
    for measured in report.stages:
        if measured.stage in relevant:
            actual, critical = measured.actual_ms, measured.critical_ms
            limits[measured.stage] = (actual, actual if critical is None else min(actual, critical))
    found: list[Finding] = []
    if streamable:  # what a request's levers (streaming) look for: an answer that was not streamed
        for find_in_request in REQUEST_FINDERS:
            finding = find_in_request(calls, report, baseline, limits, protected)
            if finding is not None:
                found.append(finding)
    for stage, (modelled, keyed, reasoned) in relevant.items():
        cap = limits[stage][1] if stage in limits else 0.0
        if cap <= 0:
            continue
        members = by_stage[stage]
        stats: dict[str, ModelStats | None] = {}  # filled by the first lever that reads them
        for find_in_stage, by_arguments, by_reasoning in STAGE_FINDERS:
            if (reasoned if by_reasoning else keyed if by_arguments else modelled) and (
                finding := find_in_stage(stage, members, baseline, cap, stats, quality)
            ) is not None:
                found.append(finding)
    return found
