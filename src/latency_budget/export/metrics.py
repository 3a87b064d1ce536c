"""Budget metrics, with attributes drawn only from configured names (bounded cardinality)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation, get_meter_provider

from latency_budget import _attributes as attr
from latency_budget._core.report import TOTAL, TraceReport
from latency_budget._version import __version__
from latency_budget.export._bank import BankCounter, MetricBank

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["BudgetMetrics"]

# Latency buckets in ms: fine below a second, where budgets of AI stages usually sit.
_BUCKETS_MS = (5, 10, 25, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 20000, 60000)

# (stage, kind, profile, within_budget): one series of latency_budget.requests.
_RequestKey = tuple[str, str, str, bool]
_VIOLATIONS = "latency_budget.violations"
_VIOLATIONS_HELP = "Budget violations by stage, kind and severity."
_REQUESTS = "latency_budget.requests"
_REQUESTS_HELP = (
    "Requests judged against each budget (per stage that ran, total, first token), and whether they stayed within it."
)


class BudgetMetrics:
    """An ``on_report`` sink that records, per finished trace:

    - ``latency_budget.stage.duration`` (histogram, ms): stage, profile, violated;
    - ``latency_budget.stage.critical_duration`` (histogram, ms): stage;
    - ``latency_budget.violations`` (counter): stage, kind, severity;
    - ``latency_budget.trace.duration`` (histogram, ms): profile, violated;
    - ``latency_budget.requests`` (counter): stage, kind, profile, within_budget. One per
      budget a request was judged against: per stage that ran and has a budget (kind
      ``stage``, within when none of its budgets broke, at any severity), and for the
      request's ``total_ms`` (stage ``total``, kind ``total``) and ``first_token_ms``
      (stage ``total``, kind ``first_token``, only when a first token was measured). The
      denominator and numerator of the violation ratios that objectives alert on;
    - ``latency_budget.hint.potential_savings`` (histogram, ms): stage, kind (one value per
      ``latency_budget.hint``: where time could be won).

    Stage and profile values come from the budget file, and hint kinds from a fixed set,
    never from span data.

    The instruments are the meter provider's (the global one by default). With ``bank``
    they are a :class:`~latency_budget.export._bank.MetricBank`'s instead, which whoever
    made it collects and exports (``latency-budget serve`` does, for a tenth of the cost
    a record); ``meter_provider`` is then not used.

    A report judged on part of its trace (``report.partial``, written by ``serve`` only)
    is left out, unless ``partial_traces``: its figures would pass for a whole request's.
    """

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        *,
        bank: MetricBank | None = None,
        partial_traces: bool = False,
    ) -> None:
        self._partial_traces = partial_traces
        # With a bank (serve, which exports it itself), every instrument is the bank's: a record
        # there costs a tenth of an SDK one (see _bank). Otherwise the meter provider's.
        histogram: Callable[[str, str], _Histogram]
        if bank is not None:
            histogram = functools.partial(_bank_histogram, bank)
            self._violations: _Counter = bank.counter(_VIOLATIONS, "{violation}", _VIOLATIONS_HELP)
            requests = bank.counter(_REQUESTS, "{request}", _REQUESTS_HELP, synchronous=False)
            self._add_requests: Callable[[list[_RequestKey]], None] = functools.partial(_add_each, requests)
        else:
            meter = (meter_provider or get_meter_provider()).get_meter("latency_budget", __version__)
            histogram = functools.partial(_sdk_histogram, meter)
            self._violations = meter.create_counter(_VIOLATIONS, unit="{violation}", description=_VIOLATIONS_HELP)
            # Several counts per request: a synchronous counter's add() costs about as much as a
            # histogram record, so they are kept here (a dict update under one lock per request)
            # and reported, cumulative, when the reader collects.
            self._requests_lock = threading.Lock()
            self._requests: dict[_RequestKey, int] = {}
            self._add_requests = self._count_requests
            meter.create_observable_counter(
                _REQUESTS, callbacks=[self._observe_requests], unit="{request}", description=_REQUESTS_HELP
            )
        self._stage = histogram(
            "latency_budget.stage.duration", "Wall-clock time of each stage per request (union of its spans)."
        )
        self._critical = histogram(
            "latency_budget.stage.critical_duration", "Time each stage spent on the request's critical path."
        )
        self._hint = histogram(
            "latency_budget.hint.potential_savings",
            "Estimated time each latency lever (hint) would save in a request.",
        )
        self._trace = histogram(
            "latency_budget.trace.duration", "End-to-end time of each request (its local root span)."
        )

    def __call__(self, report: TraceReport) -> None:
        if report.partial is not None and not self._partial_traces:
            return
        profile = report.profile
        judged: list[_RequestKey] = []
        for stage in report.stages:
            if stage.seen:
                self._stage.record(
                    stage.actual_ms,
                    {attr.STAGE: stage.stage, attr.PROFILE: profile, attr.VIOLATED: stage.over_budget},
                )
                if (
                    stage.budget_ms is not None
                    or stage.first_token_budget_ms is not None
                    or stage.max_calls is not None
                ):
                    judged.append((stage.stage, "stage", profile, not stage.violations))
            if stage.critical_ms:
                self._critical.record(stage.critical_ms, {attr.STAGE: stage.stage})
        total_within = first_token_within = True
        for violation in report.violations:
            self._violations.add(
                1, {attr.STAGE: violation.stage, attr.KIND: violation.kind, attr.SEVERITY: violation.severity}
            )
            if violation.stage == TOTAL:
                if violation.kind == "total":
                    total_within = False
                elif violation.kind == "first_token":
                    first_token_within = False
        for hint in report.hints:
            self._hint.record(hint.potential_savings_ms, {attr.STAGE: hint.stage, attr.HINT_KIND: hint.kind})
        self._trace.record(report.total_actual_ms, {attr.PROFILE: profile, attr.VIOLATED: report.violated})
        if report.total_budget_ms is not None:
            judged.append((TOTAL, "total", profile, total_within))
        if report.first_token_budget_ms is not None and report.first_token_ms is not None:
            judged.append((TOTAL, "first_token", profile, first_token_within))
        if judged:
            self._add_requests(judged)

    def _count_requests(self, judged: list[_RequestKey]) -> None:
        counts = self._requests
        with self._requests_lock:
            for key in judged:
                counts[key] = counts.get(key, 0) + 1

    def _observe_requests(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._requests_lock:
            counts = list(self._requests.items())
        return [
            Observation(
                count,
                {attr.STAGE: stage, attr.KIND: kind, attr.PROFILE: profile, attr.WITHIN_BUDGET: within},
            )
            for (stage, kind, profile, within), count in counts
        ]


class _Histogram(Protocol):
    def record(self, amount: float, attributes: dict[str, AttributeValue]) -> None: ...


class _Counter(Protocol):
    def add(self, amount: int, attributes: dict[str, AttributeValue]) -> None: ...


def _sdk_histogram(meter: Meter, name: str, description: str) -> _Histogram:
    return meter.create_histogram(
        name, unit="ms", description=description, explicit_bucket_boundaries_advisory=_BUCKETS_MS
    )


def _bank_histogram(bank: MetricBank, name: str, description: str) -> _Histogram:
    return bank.histogram(name, "ms", description, _BUCKETS_MS)


def _add_each(counter: BankCounter, judged: list[_RequestKey]) -> None:
    for stage, kind, profile, within in judged:
        counter.add(1, {attr.STAGE: stage, attr.KIND: kind, attr.PROFILE: profile, attr.WITHIN_BUDGET: within})
