"""Judge recorded spans (from files or a tracing backend) with the processor's own accounting.

The CLI's ``check``, ``report`` and ``suggest`` read traces into :class:`SpanRecord`
values and call :func:`evaluate_spans`. It classifies, measures and evaluates with the
same classifier, first-token reader, :class:`TraceState` and ``evaluate`` as the live
processor, so a recorded trace gets the verdict it got (or would have got) in production.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import Event
from opentelemetry.trace import SpanKind

from latency_budget._config.model import BudgetConfig
from latency_budget._core.first_token import time_to_first_token_ns
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import TraceState

__all__ = ["SpanRecord", "evaluate_spans"]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One ended span as a recording holds it.

    ``remote_parent`` is true when the parent ran in another process or service, which
    makes this span a local root, as a remote parent context does in the live processor.
    """

    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    end_ns: int
    kind: SpanKind = SpanKind.INTERNAL
    scope: str = ""
    attributes: Mapping[str, object] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    remote_parent: bool = False


def evaluate_spans(
    config: BudgetConfig, spans: Iterable[SpanRecord], *, max_spans_per_trace: int = 1_000
) -> list[TraceReport]:
    """One report per local root among ``spans``, ordered by the root's start time.

    A span whose parent is absent from the recording is treated as a local root. As in
    the live processor, spans that end after their local root are not counted, and the
    profile is chosen from the root's name, kind and attributes (here, its final ones).
    """
    by_id: dict[tuple[int, int], SpanRecord] = {}
    for span in spans:
        by_id[(span.trace_id, span.span_id)] = span

    roots: dict[tuple[int, int], SpanRecord] = {}
    owner: dict[tuple[int, int], tuple[int, int]] = {}

    def local_root(key: tuple[int, int]) -> tuple[int, int]:
        path = []
        while key not in owner:
            span = by_id[key]
            parent = (span.trace_id, span.parent_id) if span.parent_id is not None else None
            if parent is None or span.remote_parent or parent not in by_id or parent in path or parent == key:
                roots[key] = span
                owner[key] = key
                break
            path.append(key)
            key = parent
        found = owner[key]
        for step in path:
            owner[step] = found
        return found

    members: dict[tuple[int, int], list[SpanRecord]] = {}
    for key, span in by_id.items():
        members.setdefault(local_root(key), []).append(span)

    classifier = config.classifier
    reports: list[TraceReport] = []
    for root_key, root in sorted(roots.items(), key=lambda item: (item[1].start_ns, item[0])):
        budgets = config.budgets_for_root(root.name, root.kind, root.scope, root.attributes)
        state = TraceState(config, budgets, root.span_id, root.start_ns, root.trace_id)
        for span in sorted(members[root_key], key=lambda s: (s.end_ns, s.start_ns)):
            if span is not root and span.end_ns > root.end_ns:
                continue  # ended after its root: the live processor could not count it either
            stage = classifier.classify(span.name, span.kind, span.scope, span.attributes)
            ttft = None
            if stage >= 0:
                ttft = time_to_first_token_ns(
                    config.stages[stage].first_token, span.start_ns, span.attributes, span.events
                )
            parent = None if span is root else span.parent_id
            if not state.record(span.span_id, parent, stage, span.start_ns, span.end_ns, ttft, max_spans_per_trace):
                state.record_overflow(stage, span.start_ns, span.end_ns, ttft)
        reports.append(state.report(root.start_ns, root.end_ns, trace_id=root.trace_id, root_name=root.name))
    return reports
