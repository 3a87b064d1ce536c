"""Before against after in a test suite: :func:`assert_no_regression`, the comparison of ``latency-budget compare``.

A side is a :class:`~latency_budget.testing.BudgetResult` of repeated runs (its runs' own
reports), judged requests, or a recording (OTLP JSON lines or Jaeger JSON) read and judged
as ``latency-budget report`` reads it, by the budgets given or the other side's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from latency_budget._config import BudgetConfig, as_config
from latency_budget._core.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from latency_budget._core.comparison import ALL_PROFILES, Comparison, compare
from latency_budget._core.report import TOTAL, TraceReport

if TYPE_CHECKING:
    from latency_budget.testing import BudgetResult

__all__ = ["assert_no_regression"]

Limits = str | Mapping[str, str]


def _reports(side: object, config: BudgetConfig) -> list[TraceReport]:
    from latency_budget.testing import BudgetResult  # noqa: PLC0415 (the package imports this module)

    if isinstance(side, BudgetResult):
        return list(side.runs)
    if isinstance(side, (str, os.PathLike)):
        from latency_budget.cli._recorded import judge_recording  # noqa: PLC0415 (the reader is the CLI's)

        return judge_recording([os.fspath(side)], config)
    reports: list[TraceReport] = list(side)  # type: ignore[call-overload]
    return reports


def _config(budgets: BudgetConfig | str | os.PathLike[str] | None, *sides: object) -> BudgetConfig:
    from latency_budget.testing import BudgetResult  # noqa: PLC0415 (the package imports this module)

    if budgets is not None:
        return as_config(budgets)
    for side in sides:
        if isinstance(side, BudgetResult):
            return side.config
    raise ValueError("no budgets to judge and name the stages by: pass budgets=, or a BudgetResult for a side")


def assert_no_regression(
    baseline: BudgetResult | Sequence[TraceReport] | str | os.PathLike[str],
    current: BudgetResult | Sequence[TraceReport] | str | os.PathLike[str],
    *,
    max_regression: Limits = "10%",
    percentile: float = 50.0,
    budgets: BudgetConfig | str | os.PathLike[str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Compare ``current`` with ``baseline`` as ``latency-budget compare`` does, and raise
    ``AssertionError`` when a limit is broken; return the comparison for further assertions.

    ``budgets`` judge a recording and name the stages (default: the budgets of a
    :class:`BudgetResult` side, the current one's first). ``max_regression`` is the end to
    end's limit (``"10%"``, ``"50ms"``) or a mapping of stage names (``"total"`` for the end
    to end) to limits: a limit is broken when the
    change at ``percentile`` is demonstrably slower (its interval above zero) and beyond the
    limit. Each side needs 10 requests for a change to be computed; with fewer, nothing can
    be shown and nothing fails.
    """
    from latency_budget.cli._compare import gate, parse_limit  # noqa: PLC0415 (one definition of a limit)

    config = _config(budgets, current, baseline)
    before, after = _reports(baseline, config), _reports(current, config)
    specs = {TOTAL: max_regression} if isinstance(max_regression, str) else dict(max_regression)
    limits = []
    for stage, given in specs.items():
        parsed = parse_limit(given if stage == TOTAL else f"{stage}={given}")
        if parsed.stage != TOTAL and parsed.stage not in config.stage_names:
            raise ValueError(f"max_regression: no stage {parsed.stage!r} in {config.source}")
        limits.append(parsed)
    found = compare(
        before,
        after,
        stages=config.stage_names,
        profiles=["default", *(p.name for p in config.profiles)],
        percentile=percentile,
        resamples=resamples,
        seed=seed,
    )
    failures = gate(found, limits)
    if failures:
        lines = [f"latency regression at p{percentile:g} ({config.source}):"]
        for broken, profile, change in failures:
            where = "end to end" if profile == ALL_PROFILES else f"{broken.stage}, profile {profile}"
            lines.append(
                f"  {where}: {change.value:+.1f}ms ({change.percent or 0:+.1f}%), interval {change.low:+.1f} to "
                f"{change.high:+.1f}ms, over the limit {broken.text()}"
            )
        raise AssertionError("\n".join(lines))
    return found
