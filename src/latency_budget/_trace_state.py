"""Per-trace accounting state, kept while a local root is open. Guarded by the processor's lock."""

from __future__ import annotations

from latency_budget.accounting import StageMeasurement, evaluate, union_length
from latency_budget.config.model import BudgetConfig, BudgetSet
from latency_budget.critical_path import RecordedSpan, critical_path_ns
from latency_budget.hints import find_hints
from latency_budget.report import TraceReport

__all__ = ["StageTally", "TraceState"]


class StageTally:
    """Counters for the ended spans of one stage in one trace (exact even when truncated)."""

    __slots__ = ("busy_ns", "count", "first_token_ns")

    def __init__(self) -> None:
        self.busy_ns = 0
        self.count = 0
        self.first_token_ns: int | None = None  # the worst (largest) of the stage's spans


class TraceState:
    """Everything remembered about one local-root trace until its root ends."""

    __slots__ = (
        "budgets",
        "config",
        "finished",
        "first_token_at",
        "last_seen",
        "owned",
        "referenced",
        "root_id",
        "root_start",
        "shared",
        "spans",
        "tallies",
        "trace_id",
        "truncated",
    )

    def __init__(
        self, config: BudgetConfig, budgets: BudgetSet, root_id: int, root_start: int, trace_id: int = 0
    ) -> None:
        self.config = config  # the configuration in force when the root started
        self.budgets = budgets  # chosen once, when the root starts
        stage_count = len(config.stages)
        self.root_id = root_id
        self.root_start = root_start
        self.tallies: list[StageTally | None] = [None] * stage_count
        self.trace_id = trace_id
        # Other active local roots of the same trace (kept on the first one), and the span
        # ids registered for this root while its trace had several: see the processor.
        self.shared: list[TraceState] = []
        self.owned: list[int] = []
        self.spans: list[RecordedSpan] = []  # ended spans, for unions and the critical path
        self.first_token_at: int | None = None  # earliest first-token instant in the trace
        self.last_seen = root_start  # span timestamps, not wall-clock reads
        self.referenced = True
        self.truncated = False
        self.finished = False

    def record(
        self,
        span_id: int,
        parent_id: int | None,
        stage: int,
        start: int,
        end: int,
        first_token_ns: int | None,
        max_spans: int,
    ) -> None:
        """Account one ended span (``stage`` -1 for none). Past ``max_spans`` only counters are kept."""
        self.referenced = True
        self.last_seen = max(self.last_seen, end)
        if len(self.spans) < max_spans:
            self.spans.append((span_id, parent_id, start, end, stage))
        else:
            self.truncated = True
        if stage < 0:
            return
        tally = self.tallies[stage]
        if tally is None:
            tally = self.tallies[stage] = StageTally()
        tally.count += 1
        if end > start:
            tally.busy_ns += end - start
        if first_token_ns is not None:
            if tally.first_token_ns is None or first_token_ns > tally.first_token_ns:
                tally.first_token_ns = first_token_ns
            instant = start + first_token_ns
            if self.first_token_at is None or instant < self.first_token_at:
                self.first_token_at = instant

    def report(
        self, root_start: int, root_end: int, *, trace_id: int | None = None, root_name: str | None = None
    ) -> TraceReport:
        """Judge the trace, once its local root (``root_start`` to ``root_end``) has ended."""
        stages = self.budgets.stages
        intervals: list[list[tuple[int, int]]] = [[] for _ in stages]
        for _, _, start, end, stage in self.spans:
            if stage >= 0:
                intervals[stage].append((start, end))
        measurements: dict[str, StageMeasurement] = {}
        for index, (budget, tally) in enumerate(zip(stages, self.tallies, strict=True)):
            if tally is None:
                continue
            first_token_ms = tally.first_token_ns / 1e6 if tally.first_token_ns is not None else None
            measurements[budget.name] = StageMeasurement(
                union_length(intervals[index]) / 1e6, tally.busy_ns / 1e6, tally.count, first_token_ms
            )
        first_token_ms = None
        if self.first_token_at is not None and self.first_token_at >= root_start:
            first_token_ms = (self.first_token_at - root_start) / 1e6
        critical, unattributed = critical_path_ns(self.root_id, root_start, root_end, self.spans, len(stages))
        return evaluate(
            self.budgets,
            measurements,
            total_actual_ms=max(0, root_end - root_start) / 1e6,
            first_token_ms=first_token_ms,
            critical_ms={budget.name: ns / 1e6 for budget, ns in zip(stages, critical, strict=True)},
            unattributed_ms=unattributed / 1e6,
            hints=find_hints(
                self.budgets, self.root_id, self.spans, [t.count if t is not None else 0 for t in self.tallies]
            ),
            trace_id=trace_id,
            span_id=self.root_id,
            root_name=root_name,
            start_time_ns=root_start,
            end_time_ns=root_end,
        )
