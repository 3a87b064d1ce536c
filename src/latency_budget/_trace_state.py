"""Per-trace accounting state, kept while a local root is open. Guarded by the processor's lock."""

from __future__ import annotations

from latency_budget.accounting import StageMeasurement, evaluate, union_length
from latency_budget.config.model import BudgetSet
from latency_budget.matching import AttributeDecision
from latency_budget.report import TraceReport

__all__ = ["StageTally", "TraceState"]


class StageTally:
    """The ended spans of one stage in one trace."""

    __slots__ = ("busy_ns", "count", "first_token_ns", "intervals")

    def __init__(self) -> None:
        self.intervals: list[tuple[int, int]] = []
        self.busy_ns = 0
        self.count = 0
        self.first_token_ns: int | None = None  # the worst (largest) of the stage's spans


class TraceState:
    """Everything remembered about one local-root trace until its root ends."""

    __slots__ = (
        "budgets",
        "finished",
        "first_token_at",
        "last_seen",
        "open",
        "recorded",
        "referenced",
        "root_id",
        "root_start",
        "tallies",
        "truncated",
    )

    def __init__(self, budgets: BudgetSet, root_id: int, root_start: int, stage_count: int) -> None:
        self.budgets = budgets  # chosen once, when the root starts
        self.root_id = root_id
        self.root_start = root_start
        self.tallies: list[StageTally | None] = [None] * stage_count
        # Open span id -> its stage index, or the attribute rules to re-check at its end.
        self.open: dict[int, int | AttributeDecision] = {}
        self.first_token_at: int | None = None  # earliest first-token instant in the trace
        self.last_seen = root_start  # span timestamps, not wall-clock reads
        self.referenced = True
        self.recorded = 0
        self.truncated = False
        self.finished = False

    def touch(self, now: int) -> None:
        """Note activity at span time ``now`` (for LRU and idle eviction)."""
        self.referenced = True
        self.last_seen = max(self.last_seen, now)

    def record(self, stage: int, start: int, end: int, first_token_ns: int | None, max_intervals: int) -> None:
        """Account one ended stage span. Past ``max_intervals`` only counters are kept."""
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
        if self.recorded < max_intervals:
            self.recorded += 1
            tally.intervals.append((start, end))
        else:
            self.truncated = True
        self.touch(end)

    def report(
        self, root_start: int, root_end: int, *, trace_id: int | None = None, root_name: str | None = None
    ) -> TraceReport:
        """Judge the trace, once its local root (``root_start`` to ``root_end``) has ended."""
        measurements: dict[str, StageMeasurement] = {}
        for budget, tally in zip(self.budgets.stages, self.tallies, strict=True):
            if tally is None:
                continue
            first_token_ms = tally.first_token_ns / 1e6 if tally.first_token_ns is not None else None
            measurements[budget.name] = StageMeasurement(
                union_length(tally.intervals) / 1e6, tally.busy_ns / 1e6, tally.count, first_token_ms
            )
        first_token_ms = None
        if self.first_token_at is not None and self.first_token_at >= root_start:
            first_token_ms = (self.first_token_at - root_start) / 1e6
        return evaluate(
            self.budgets,
            measurements,
            total_actual_ms=max(0, root_end - root_start) / 1e6,
            first_token_ms=first_token_ms,
            trace_id=trace_id,
            span_id=self.root_id,
            root_name=root_name,
        )
