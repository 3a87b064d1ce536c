"""Assert latency budgets in your own test suite.

A block, judged as one request::

    from latency_budget.testing import assert_within_budget

    with assert_within_budget("budgets.yaml") as result:
        answer = my_pipeline("question")
    print(result.table())

A function run N times, judged at a percentile (for code whose latency varies)::

    result = assert_within_budget("budgets.yaml", lambda: my_pipeline("question"), runs=20, percentile=95)

The spans started inside (on any thread) are judged with the processor's own core. An
error-level budget exceeded raises ``AssertionError`` with the stage table; a warn-level
one issues a :class:`LatencyBudgetWarning` and passes. The ``latency_budget`` pytest
fixture (installed with the package) is the same function, with a default budget file
from ``--latency-budgets`` or the ``latency_budgets`` ini option.

Before against after (what ``latency-budget compare`` does), on repeated runs or recordings::

    old = assert_within_budget("budgets.yaml", lambda: old_pipeline("question"), runs=30, percentile=95)
    new = assert_within_budget("budgets.yaml", lambda: my_pipeline("question"), runs=30, percentile=95)
    found = assert_no_regression(old, new, max_regression={"total": "10%", "model_call": "50ms"})
    assert found.row("retrieval").verdict != "slower"

``assert_no_regression`` raises ``AssertionError`` when a stage (or the end to end time) is
demonstrably slower, at the percentile, by more than its limit; the baseline can also be a
recording (``"baseline.jsonl"``), judged by the other side's budgets.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import overload

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from latency_budget._config import BudgetConfig, as_config
from latency_budget._config.model import Severity
from latency_budget._core.comparison import Comparison
from latency_budget._core.report import TraceReport
from latency_budget._core.wording import plural
from latency_budget.testing._baseline import assert_no_regression
from latency_budget.testing._capture import Capture, capture_spans
from latency_budget.testing._verdict import judge_block, percentile_reports

__all__ = [
    "BudgetBlock",
    "BudgetChecker",
    "BudgetResult",
    "LatencyBudgetWarning",
    "assert_no_regression",
    "assert_within_budget",
]

Budgets = BudgetConfig | str | os.PathLike[str]


class LatencyBudgetWarning(UserWarning):
    """A warn-level latency budget was exceeded (the check itself passed)."""


class BudgetResult:
    """What a budget check measured; filled in when the block (or the last run) ends.

    ``reports`` holds the verdicts: the block's report, or with ``runs`` one percentile
    report per profile the runs were judged under. ``runs`` holds each run's own report
    and ``spans`` every captured span.
    """

    def __init__(self, config: BudgetConfig, percentile: float | None) -> None:
        self.config = config
        self.percentile = percentile
        self._reports: tuple[TraceReport, ...] | None = None
        self._runs: tuple[TraceReport, ...] = ()
        self._spans: tuple[ReadableSpan, ...] = ()

    def _fill(
        self, reports: tuple[TraceReport, ...], runs: tuple[TraceReport, ...], spans: tuple[ReadableSpan, ...]
    ) -> None:
        self._reports, self._runs, self._spans = reports, runs, spans

    @property
    def reports(self) -> tuple[TraceReport, ...]:
        """The verdict reports (one, unless percentile runs fell under several profiles)."""
        if self._reports is None:
            raise RuntimeError("the budget result is available once the block has ended")
        return self._reports

    @property
    def report(self) -> TraceReport:
        """The single verdict report (``ValueError`` when runs fell under several profiles)."""
        reports = self.reports
        if len(reports) != 1:
            raise ValueError(f"{len(reports)} reports (one per profile); use .reports")
        return reports[0]

    @property
    def runs(self) -> tuple[TraceReport, ...]:
        """Each run's own report, in order (the block's report for a ``with`` block)."""
        self.reports  # noqa: B018 (raises before the end)
        return self._runs

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every span captured, all runs together."""
        self.reports  # noqa: B018
        return self._spans

    @property
    def violated(self) -> bool:
        """Whether an error-level budget was exceeded (the check failed)."""
        return any(report.violated for report in self.reports)

    @property
    def warned(self) -> bool:
        """Whether a warn-level budget was exceeded."""
        return any(report.warned for report in self.reports)

    def table(self) -> str:
        """The stage table of each verdict: Stage | Budget | Actual | Within budget?"""
        return "\n\n".join(f"{_heading(self, report)}:\n{report.table()}" for report in self.reports)

    def __repr__(self) -> str:
        if self._reports is None:
            return "BudgetResult(pending)"
        return f"BudgetResult(violated={self.violated}, warned={self.warned}, runs={len(self._runs)})"


class BudgetBlock:
    """The context manager :func:`assert_within_budget` returns without a function (single use)."""

    def __init__(self, config: BudgetConfig, tracer_provider: trace.TracerProvider | None) -> None:
        self._config = config
        self._provider = tracer_provider
        self._stack = ExitStack()
        self._capture: Capture | None = None
        self._result: BudgetResult | None = None

    def __enter__(self) -> BudgetResult:
        if self._result is not None:
            raise RuntimeError("an assert_within_budget block can be entered once; call assert_within_budget again")
        self._result = BudgetResult(self._config, None)
        self._capture = self._stack.enter_context(capture_spans(self._provider))
        return self._result

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stack.close()
        if exc_type is not None:
            return  # the block failed: its own exception says more than any budget could
        assert self._capture is not None
        assert self._result is not None
        spans = _require_spans(tuple(self._capture.spans), "inside the block")
        report = judge_block(self._config, spans)
        self._result._fill((report,), (report,), spans)
        _enforce(self._result, stacklevel=3)


@overload
def assert_within_budget(budgets: Budgets, *, tracer_provider: trace.TracerProvider | None = None) -> BudgetBlock: ...


@overload
def assert_within_budget(
    budgets: Budgets,
    fn: Callable[[], object],
    *,
    runs: int = 1,
    percentile: float = 100.0,
    tracer_provider: trace.TracerProvider | None = None,
) -> BudgetResult: ...


def assert_within_budget(
    budgets: Budgets,
    fn: Callable[[], object] | None = None,
    *,
    runs: int | None = None,
    percentile: float | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> BudgetBlock | BudgetResult:
    """Check the latency of the spans a block (or ``fn``) starts against ``budgets``.

    ``budgets`` is a budget file's path or a loaded :class:`BudgetConfig`. Without
    ``fn``, returns a context manager whose ``as`` value is the :class:`BudgetResult`.
    With ``fn``, calls it ``runs`` times (each call one request) and judges the
    ``percentile`` of each stage's and the total's latency over the runs (default 100:
    the worst run); returns the result.

    Raises ``AssertionError`` with the stage table when an error-level budget is
    exceeded; warn-level ones issue a :class:`LatencyBudgetWarning`. Spans come from the
    global tracer provider (or ``tracer_provider``); with none set, a temporary one is
    installed for the duration and the global state is restored afterwards.
    """
    return _check(as_config(budgets), fn, runs, percentile, tracer_provider)


class BudgetChecker:
    """:func:`assert_within_budget` with a default budget file: the ``latency_budget`` pytest fixture.

    ``latency_budget()`` is a block over the default budgets, ``latency_budget("other.yaml")``
    one over other budgets, ``latency_budget(fn=f, runs=20, percentile=95)`` repeats ``f``.
    """

    def __init__(self, default: Budgets | None = None) -> None:
        self.default = default
        self._loaded: BudgetConfig | None = None

    def budgets(self) -> BudgetConfig:
        """The default budgets, loaded once (``LookupError`` when none is configured)."""
        if self._loaded is None:
            if self.default is None:
                raise LookupError(
                    "no budget file given: pass one (latency_budget('budgets.yaml')), or set --latency-budgets "
                    "or the latency_budgets ini option"
                )
            self._loaded = as_config(self.default)
        return self._loaded

    @overload
    def __call__(
        self, budgets: Budgets | None = None, *, tracer_provider: trace.TracerProvider | None = None
    ) -> BudgetBlock: ...

    @overload
    def __call__(
        self,
        budgets: Budgets | None = None,
        *,
        fn: Callable[[], object],
        runs: int = 1,
        percentile: float = 100.0,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> BudgetResult: ...

    def __call__(
        self,
        budgets: Budgets | None = None,
        *,
        fn: Callable[[], object] | None = None,
        runs: int | None = None,
        percentile: float | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> BudgetBlock | BudgetResult:
        config = self.budgets() if budgets is None else as_config(budgets)
        return _check(config, fn, runs, percentile, tracer_provider)

    def assert_no_regression(
        self,
        baseline: BudgetResult | Sequence[TraceReport] | str | os.PathLike[str],
        current: BudgetResult | Sequence[TraceReport] | str | os.PathLike[str],
        *,
        max_regression: str | Mapping[str, str] = "10%",
        percentile: float = 50.0,
    ) -> Comparison:
        """:func:`assert_no_regression`, a recording judged by the default budgets when no side brings its own."""
        budgets = None
        if not isinstance(baseline, BudgetResult) and not isinstance(current, BudgetResult):
            budgets = self.budgets()
        return assert_no_regression(
            baseline, current, max_regression=max_regression, percentile=percentile, budgets=budgets
        )


def _check(
    config: BudgetConfig,
    fn: Callable[[], object] | None,
    runs: int | None,
    percentile: float | None,
    tracer_provider: trace.TracerProvider | None,
) -> BudgetBlock | BudgetResult:
    """A block to enter, without ``fn``; else ``fn`` repeated, judged and enforced (warnings: the caller's caller)."""
    if fn is None:
        if runs is not None or percentile is not None:
            raise TypeError(
                "runs= and percentile= need a function to repeat: "
                "assert_within_budget(budgets, fn, runs=20, percentile=95)"
            )
        return BudgetBlock(config, tracer_provider)
    result = _repeat(config, fn, runs, percentile, tracer_provider)
    _enforce(result, stacklevel=4)
    return result


def _repeat(
    config: BudgetConfig,
    fn: Callable[[], object],
    runs: int | None,
    percentile: float | None,
    tracer_provider: trace.TracerProvider | None,
) -> BudgetResult:
    runs = 1 if runs is None else runs
    percentile = 100.0 if percentile is None else percentile
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive whole number, got {runs!r}")
    if isinstance(percentile, bool) or not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    reports: list[TraceReport] = []
    spans: list[ReadableSpan] = []
    for run in range(runs):
        with capture_spans(tracer_provider) as capture:
            fn()
        captured = _require_spans(tuple(capture.spans), f"by run {run + 1} of {runs}")
        reports.append(judge_block(config, captured))
        spans.extend(captured)
    result = BudgetResult(config, percentile if runs > 1 else None)
    verdicts = tuple(reports) if runs == 1 else percentile_reports(config, reports, percentile)
    result._fill(verdicts, tuple(reports), tuple(spans))
    return result


def _require_spans(spans: tuple[ReadableSpan, ...], where: str) -> tuple[ReadableSpan, ...]:
    if not spans:
        raise AssertionError(
            f"latency budget: no span was started {where}, so there is nothing to judge. Is the code "
            "instrumented, and does it use the global tracer provider (or the one passed as tracer_provider=)?"
        )
    return spans


def _heading(result: BudgetResult, report: TraceReport) -> str:
    where = f"{result.config.source}, profile {report.profile}"
    if result.percentile is not None:
        return f"p{result.percentile:g} over {plural(len(result.runs), 'run')} ({where})"
    return f"({where})"


def _enforce(result: BudgetResult, *, stacklevel: int) -> None:
    """Raise for error-level violations; warn (pointing ``stacklevel`` frames up) for warn-level ones."""
    failed = [report for report in result.reports if report.violated]
    if failed:
        raise AssertionError("\n\n".join(_message("latency budget exceeded", result, r, "error") for r in failed))
    for report in result.reports:
        if report.warned:
            warnings.warn(
                LatencyBudgetWarning(_message("latency budget warning", result, report, "warn")),
                stacklevel=stacklevel,
            )


def _message(title: str, result: BudgetResult, report: TraceReport, severity: Severity) -> str:
    names = report.broken_stages(severity)
    return f"{title}: {', '.join(names)} {_heading(result, report)}\n\n{report.table()}"
