"""What a finished trace (or a hand-measured request) looked like against its budgets.

Reports are snapshots handed to ``on_report`` sinks and CLI code; treat them as read-only.
(They are slotted but not frozen: a frozen dataclass costs several microseconds more to
build, and one is built per trace on the application's thread.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from latency_budget._config.model import Severity
from latency_budget._core.call_facts import Call
from latency_budget._core.inference import InferenceSplit

if TYPE_CHECKING:  # not at run time: the levers (which hints imports) use format_ms
    from latency_budget._core.hints import Hint

__all__ = ["StageReport", "TraceReport", "Violation", "ViolationKind", "format_ms"]

ViolationKind = Literal["duration", "first_token", "calls", "total"]
TOTAL = "total"


@dataclass(slots=True)
class Violation:
    """One broken budget. ``stage`` is a stage name, or ``"total"`` for the whole request."""

    stage: str
    kind: ViolationKind
    severity: Severity
    budget_ms: float | None = None
    actual_ms: float | None = None
    over_ms: float | None = None
    max_calls: int | None = None
    calls: int | None = None


@dataclass(slots=True)
class StageReport:
    """A stage's measurements and budgets in one request.

    ``actual_ms`` is the wall-clock union of the stage's spans (parallel calls count
    once), ``busy_ms`` their sum, and ``count`` their number.
    """

    stage: str
    budget_ms: float | None
    actual_ms: float
    busy_ms: float
    count: int
    severity: Severity = "error"
    first_token_ms: float | None = None
    first_token_budget_ms: float | None = None
    max_calls: int | None = None
    violations: tuple[Violation, ...] = ()
    critical_ms: float | None = None  # this stage's share of the critical path, when known

    @property
    def seen(self) -> bool:
        """Whether any span (or hand measurement) of this stage was recorded."""
        return self.count > 0

    @property
    def within_budget(self) -> bool:
        """True when no budget of this stage, of any kind or severity, was broken."""
        return not self.violations

    @property
    def over_budget(self) -> bool:
        """True when an error-level budget of this stage was broken (what ``violated`` counts)."""
        return any(v.severity == "error" for v in self.violations)

    @property
    def over_ms(self) -> float:
        """How far the stage's actual exceeds its duration budget (0 when within)."""
        if self.budget_ms is None:
            return 0.0
        return max(0.0, self.actual_ms - self.budget_ms)


@dataclass(slots=True)
class TraceReport:
    """The verdict on one request: per-stage figures, violations and the totals.

    ``calls`` are the request's stage spans as the latency levers read them (model,
    tokens, streaming; see ``hints``), when the processor or the CLI recorded them: a
    sequence read from the spans' attributes when first used.
    """

    profile: str
    stages: tuple[StageReport, ...]
    total_budget_ms: float | None
    total_actual_ms: float
    violations: tuple[Violation, ...]
    first_token_ms: float | None = None
    first_token_budget_ms: float | None = None
    unattributed_ms: float | None = None  # critical-path time no stage span covered
    hints: tuple[Hint, ...] = ()
    trace_id: int | None = None
    span_id: int | None = None
    root_name: str | None = None
    start_time_ns: int | None = None  # the local root's start and end (epoch ns), when known
    end_time_ns: int | None = None
    calls: Sequence[Call] = ()  # read from the spans when first iterated (see RecordedCalls)
    hints_left_out: int = 0  # hints of the trace's shape that hints.min_saving_ms held back
    inference: InferenceSplit | None = None  # where the model calls' time went (see _core/inference.py)
    # (stage, start ns, end ns) of each span of a protected stage: the checks no lever may pass over.
    protected_spans: tuple[tuple[str, int, int], ...] = ()
    # Why the verdict rests on part of the trace (``serve`` only, see _serve/partial.py), or None:
    # the budget metrics leave such a report out unless told otherwise.
    partial: str | None = None

    # The derived verdicts below are the definitions the root span's attributes, the CLI
    # and the testing helper all use. They run once per trace on the application's
    # thread (see annotate.root_attributes), so the common case, no violation, returns
    # before any generator is made.

    @property
    def violated(self) -> bool:
        """True when any error-level budget (a stage's or the total's) was broken."""
        for violation in self.violations:  # noqa: SIM110 - a loop makes no generator
            if violation.severity == "error":
                return True
        return False

    @property
    def warned(self) -> bool:
        """True when any warn-level budget (a stage's or the total's) was broken."""
        for violation in self.violations:  # noqa: SIM110 - a loop makes no generator
            if violation.severity == "warn":
                return True
        return False

    @property
    def over_budget_stages(self) -> tuple[str, ...]:
        """Stages with an error-level violation of any kind, in config order (never ``total``)."""
        if not self.violations:
            return ()
        return tuple(s.stage for s in self.stages if s.over_budget)

    @property
    def warn_stages(self) -> tuple[str, ...]:
        """Stages with a warn-level violation, in config order."""
        if not self.violations:
            return ()
        return tuple(s.stage for s in self.stages if any(v.severity == "warn" for v in s.violations))

    def broken_stages(self, severity: Severity = "error") -> tuple[str, ...]:
        """What broke a budget of ``severity``: its stages in config order, then ``"total"``.

        ``"total"`` stands for the request-level budgets (``total_ms``, ``first_token_ms``),
        last, so a request over budget always names what it broke. The root span's
        ``over_budget_stages`` and ``warn_stages`` attributes, the demo and the testing
        helper all say this.
        """
        if not self.violations:
            return ()
        stages = self.over_budget_stages if severity == "error" else self.warn_stages
        for violation in self.violations:
            if violation.stage == TOTAL and violation.severity == severity:
                return (*stages, TOTAL)
        return stages

    @property
    def critical_stage(self) -> str | None:
        """The stage with the most critical-path time (first in config order on ties)."""
        best, most = None, 0.0
        for stage in self.stages:
            critical = stage.critical_ms
            if critical and critical > most:
                best, most = stage.stage, critical
        return best

    def stage(self, name: str) -> StageReport:
        """The report of one stage (``KeyError`` when the stage is not configured)."""
        for stage in self.stages:
            if stage.stage == name:
                return stage
        raise KeyError(name)

    def table(self, *, all_stages: bool = False) -> str:
        """The stage table: Stage | Budget | Actual | Within budget?

        Over-budget rows are marked; the last row is the total. Unseen stages are left
        out unless ``all_stages``.
        """
        rows = [("Stage", "Budget", "Actual", "Within budget?")]
        for stage in self.stages:
            if not stage.seen and not all_stages:
                continue
            rows.append(
                (stage.stage, format_ms(stage.budget_ms), format_ms(stage.actual_ms), _verdict(stage.violations))
            )
        total_violations = tuple(v for v in self.violations if v.stage == TOTAL)
        rows.append(
            (TOTAL, format_ms(self.total_budget_ms), format_ms(self.total_actual_ms), _verdict(total_violations))
        )
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = []
        for n, row in enumerate(rows):
            lines.append(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
            if n == 0:
                lines.append("-+-".join("-" * width for width in widths))
        return "\n".join(lines)


def _verdict(violations: tuple[Violation, ...]) -> str:
    if not violations:
        return "yes"
    kinds = ", ".join(dict.fromkeys(v.kind for v in violations))
    if any(v.severity == "error" for v in violations):
        return f"NO  <-- over budget ({kinds})"
    return f"warn ({kinds})"


def format_ms(value: float | None) -> str:
    """A millisecond figure for people: ``45.2ms``, ``1250ms``, or ``-`` when unknown."""
    if value is None:
        return "-"
    return f"{value:.1f}".rstrip("0").rstrip(".") + "ms"
