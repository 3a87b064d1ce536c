"""From captured spans to reports: one request per block, and percentiles over runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from opentelemetry.sdk.trace import ReadableSpan

from latency_budget._config.model import BudgetConfig
from latency_budget._core.accounting import StageMeasurement, evaluate
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import is_local_root
from latency_budget._core.wording import plural
from latency_budget._replay import SpanRecord, evaluate_spans, record_of

__all__ = ["BLOCK_ROOT_NAME", "judge_block", "percentile_reports"]

# The name of the stand-in root when a block's spans have several roots.
BLOCK_ROOT_NAME = "assert_within_budget"


def judge_block(config: BudgetConfig, spans: Sequence[ReadableSpan]) -> TraceReport:
    """The report of one block, judged as one request with the processor's own core.

    With one root span among ``spans`` (a span whose parent is absent, remote or not
    captured), that root is the request, as in production: it picks the profile and
    its duration is the total. With several (code called without a span around it),
    they are judged together under a stand-in root from the first start to the last end.
    Roots the budget file's ``requests`` rule excludes (background work started in the
    block) are left out with their spans, unless no root is a request: then the block
    itself is the request and every root counts.
    """
    records = [record_of(span) for span in spans]
    keys = {(record.trace_id, record.span_id) for record in records}
    tops = [
        record
        for record in records
        if is_local_root(record.parent_id, record.remote_parent, (record.trace_id, record.parent_id) in keys)
    ]
    requests = [top for top in tops if config.is_request(top.name, top.kind, top.scope, top.attributes)]
    if requests and len(requests) < len(tops):
        records = _beneath(records, requests)
        tops = requests
    if len(tops) > 1:
        records = _under_one_root(records, tops)
    (report,) = evaluate_spans(config, records, every_root=True)
    return report


def _beneath(records: list[SpanRecord], tops: list[SpanRecord]) -> list[SpanRecord]:
    """The records of ``tops`` and their descendants, in their order."""
    children: dict[tuple[int, int], list[SpanRecord]] = {}
    for record in records:
        if record.parent_id is not None and not record.remote_parent:
            children.setdefault((record.trace_id, record.parent_id), []).append(record)
    kept: set[int] = set()
    pending = list(tops)
    while pending:
        record = pending.pop()
        if id(record) not in kept:
            kept.add(id(record))
            pending.extend(children.get((record.trace_id, record.span_id), ()))
    return [record for record in records if id(record) in kept]


def _under_one_root(records: list[SpanRecord], tops: list[SpanRecord]) -> list[SpanRecord]:
    """Re-parent the top spans under a stand-in root, all in one (stand-in) trace."""
    trace_id = tops[0].trace_id
    used = {record.span_id for record in records}
    root_id = next(candidate for candidate in range(1, len(used) + 2) if candidate not in used)
    top_ids = {id(top) for top in tops}
    moved = [
        replace(record, trace_id=trace_id, parent_id=root_id, remote_parent=False)
        if id(record) in top_ids
        else replace(record, trace_id=trace_id)
        for record in records
    ]
    root = SpanRecord(
        trace_id=trace_id,
        span_id=root_id,
        parent_id=None,
        name=BLOCK_ROOT_NAME,
        start_ns=min(top.start_ns for top in tops),
        end_ns=max(top.end_ns for top in tops),
    )
    return [root, *moved]


def percentile_reports(config: BudgetConfig, runs: Sequence[TraceReport], percentile: float) -> tuple[TraceReport, ...]:
    """One report per profile the runs were judged under, holding the ``percentile`` of each figure.

    Each stage's actual, busy time, call count and first-token time, and the request's
    total and first-token time, are taken at the nearest-rank percentile over the runs
    (the smallest value that at least ``percentile`` % of runs do not exceed), then
    judged against the profile's budgets. A stage a run did not touch counts 0 ms there.
    """
    by_profile: dict[str, list[TraceReport]] = {}
    for report in runs:
        by_profile.setdefault(report.profile, []).append(report)
    verdicts = []
    for profile, reports in by_profile.items():
        budgets = config.budgets_by_profile(profile)
        measurements: dict[str, StageMeasurement] = {}
        for budget in budgets.stages:
            stages = [report.stage(budget.name) for report in reports]
            if not any(stage.seen for stage in stages):
                continue
            first_tokens = [s.first_token_ms for s in stages if s.first_token_ms is not None]
            measurements[budget.name] = StageMeasurement(
                actual_ms=_nearest_rank([s.actual_ms for s in stages], percentile),
                busy_ms=_nearest_rank([s.busy_ms for s in stages], percentile),
                count=round(_nearest_rank([float(s.count) for s in stages], percentile)),
                first_token_ms=_nearest_rank(first_tokens, percentile) if first_tokens else None,
            )
        first_tokens = [r.first_token_ms for r in reports if r.first_token_ms is not None]
        verdicts.append(
            evaluate(
                budgets,
                measurements,
                total_actual_ms=_nearest_rank([r.total_actual_ms for r in reports], percentile),
                first_token_ms=_nearest_rank(first_tokens, percentile) if first_tokens else None,
                root_name=f"p{percentile:g} of {plural(len(reports), 'run')}",
            )
        )
    return tuple(verdicts)


def _nearest_rank(values: Sequence[float], percentile: float) -> float:
    ordered = sorted(values)
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]
