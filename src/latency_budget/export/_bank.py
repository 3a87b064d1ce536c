"""Budget metrics aggregated here and exported by their own timer: serve's metrics pipeline.

An SDK ``Histogram.record`` costs 10-20 µs on CPython 3.11 (the measurement's attributes
are validated, sorted and hashed, the view's storage found under a lock, an exemplar
offered), and a judged trace records six to ten of them: in the Collector tier that was
about a tenth of the CPU a span. The series of the budget metrics are few and known
(stages and profiles come from the budget file, hint kinds from a fixed set), so serve,
which owns its metrics pipeline, aggregates them here instead: a record is a dictionary
look-up, a bisection and four additions under a lock. Each collection turns the
aggregates into the SDK's own point types (``MetricsData``) for the OTLP metric
exporter, with the temporality that exporter prefers, so what leaves is what the SDK
would have sent: same names, units, descriptions, bucket bounds, attributes and values
(tests/unit/test_metric_bank.py compares the two on the same reports).

In an application, :class:`~latency_budget.export.BudgetMetrics` records on the SDK
instruments of the meter provider it is given, whose readers and views are the user's.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics import Counter, ObservableCounter
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from latency_budget import _guard
from latency_budget._version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.util.types import AttributeValue

__all__ = ["BankCounter", "BankHistogram", "BankObserved", "MetricBank", "MetricPusher", "Observed"]

# Series per instrument past which new attribute sets share one, as the SDK's default
# cardinality limit does (the budget metrics' series are bounded by the budget file).
MAX_SERIES = 2000
_OVERFLOW: tuple[tuple[str, AttributeValue], ...] = (("otel.metric.overflow", True),)

_Key = tuple[tuple[str, "AttributeValue"], ...]


class _Point:
    __slots__ = ("buckets", "count", "max", "min", "sum")

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.buckets = [0] * buckets

    def copy(self) -> _Point:
        point = _Point(0)
        point.count, point.sum, point.min, point.max, point.buckets = (
            self.count,
            self.sum,
            self.min,
            self.max,
            list(self.buckets),
        )
        return point


class BankHistogram:
    """An explicit-bucket histogram (count, sum, min, max, buckets per attribute set); thread-safe."""

    __slots__ = ("_bounds", "_lock", "_points", "description", "name", "unit")
    kind: type = HistogramInstrument  # the SDK instrument it stands for: its temporality applies

    def __init__(self, name: str, unit: str, description: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self._bounds = tuple(float(bound) for bound in bounds)
        self._lock = threading.Lock()
        self._points: dict[_Key, _Point] = {}

    def record(self, value: float, attributes: Mapping[str, AttributeValue]) -> None:
        """Add one value, in the bucket the SDK puts it in (upper bounds inclusive); negatives and NaN are dropped.

        A series is told apart by its attributes' items in order (the SDK's by their set):
        each of BudgetMetrics' calls writes its keys in one order.
        """
        if not value >= 0:  # the SDK drops a negative histogram value (and NaN compares false)
            return
        key = tuple(attributes.items())
        index = bisect_left(self._bounds, value)
        with self._lock:
            point = self._points.get(key)
            if point is None:
                point = self._new_point(key)
            point.count += 1
            point.sum += value
            if value < point.min:
                point.min = value
            if value > point.max:
                point.max = value
            point.buckets[index] += 1

    def _new_point(self, key: _Key) -> _Point:
        points = self._points
        if len(points) >= MAX_SERIES - 1 and key != _OVERFLOW:
            point = points.get(_OVERFLOW)
            if point is not None:
                return point
            key = _OVERFLOW
        point = points[key] = _Point(len(self._bounds) + 1)
        return point

    def take(self, start_ns: int, now_ns: int, temporality: AggregationTemporality) -> Metric | None:
        """The histogram as a metric (None with no series); delta temporality starts every series again."""
        with self._lock:
            points = self._points
            if temporality is AggregationTemporality.DELTA:
                self._points = {}
            else:
                points = {key: point.copy() for key, point in points.items()}
        if not points:
            return None
        data = [
            HistogramDataPoint(
                attributes=dict(key),
                start_time_unix_nano=start_ns,
                time_unix_nano=now_ns,
                count=point.count,
                sum=point.sum,
                bucket_counts=point.buckets,
                explicit_bounds=self._bounds,
                min=point.min,
                max=point.max,
            )
            for key, point in points.items()
        ]
        return Metric(self.name, self.description, self.unit, Histogram(data, temporality))


class BankCounter:
    """A monotonic sum per attribute set; thread-safe."""

    __slots__ = ("_lock", "_values", "description", "kind", "name", "unit")

    def __init__(self, name: str, unit: str, description: str, *, synchronous: bool) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self.kind: type = Counter if synchronous else ObservableCounter  # the SDK instrument it stands for
        self._lock = threading.Lock()
        self._values: dict[_Key, int] = {}

    def add(self, amount: int, attributes: Mapping[str, AttributeValue]) -> None:
        """Add a non-negative amount."""
        key = tuple(attributes.items())
        with self._lock:
            values = self._values
            if key not in values and len(values) >= MAX_SERIES - 1:
                key = _OVERFLOW
            values[key] = values.get(key, 0) + amount

    def take(self, start_ns: int, now_ns: int, temporality: AggregationTemporality) -> Metric | None:
        """The sum as a metric (None with no series); delta temporality starts every series again."""
        with self._lock:
            values = self._values
            if temporality is AggregationTemporality.DELTA:
                self._values = {}
            else:
                values = dict(values)
        if not values:
            return None
        data = [NumberDataPoint(dict(key), start_ns, now_ns, value) for key, value in values.items()]
        return Metric(self.name, self.description, self.unit, Sum(data, temporality, is_monotonic=True))


@dataclass(frozen=True, slots=True)
class Observed:
    """One number a :class:`BankObserved` reads: its key in the callback's mapping, and the metric it is sent as."""

    key: str
    name: str
    unit: str
    description: str
    monotonic: bool  # a counter (a monotonic sum); else a gauge


class BankObserved:
    """Numbers read from one callback at each collection, as the SDK's observable counters and gauges are.

    The callback is called once a collection (one consistent snapshot for every number);
    if it raises, that collection has none of them and the error is logged once.
    """

    def __init__(self, numbers: Sequence[Observed], callback: Callable[[], Mapping[str, float]]) -> None:
        self._numbers = tuple(numbers)
        self._callback = callback
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # each counter's value at the last delta collection

    def take(
        self, start_ns: int, delta_start_ns: int, now_ns: int, temporality: Callable[[type], AggregationTemporality]
    ) -> list[Metric]:
        """A metric per number; a counter in delta temporality is its increase since the last collection."""
        try:
            values = self._callback()
            read = [(number, values[number.key]) for number in self._numbers]
        except Exception as exc:  # the server's bug: logged once, the next collection tries again
            _guard.log_once(
                ("metric-observe", type(exc)), logging.WARNING, "latency_budget: reading metrics failed: %r", exc
            )
            return []
        metrics = []
        with self._lock:
            for number, value in read:
                if not number.monotonic:
                    point = NumberDataPoint({}, start_ns, now_ns, value)
                    metrics.append(Metric(number.name, number.description, number.unit, Gauge([point])))
                    continue
                chosen = temporality(ObservableCounter)
                start, sent = start_ns, value
                if chosen is AggregationTemporality.DELTA:
                    start, sent = delta_start_ns, value - self._last.get(number.key, 0)
                    self._last[number.key] = value
                point = NumberDataPoint({}, start, now_ns, sent)
                metrics.append(
                    Metric(number.name, number.description, number.unit, Sum([point], chosen, is_monotonic=True))
                )
        return metrics


class MetricBank:
    """The instruments of one meter (scope ``latency_budget``), collected together as ``MetricsData``."""

    def __init__(self, resource: Resource, temporality: Callable[[type], AggregationTemporality]) -> None:
        self._resource = resource
        self._temporality = temporality  # by the SDK instrument class it stands for, as a reader asks
        self._scope = InstrumentationScope("latency_budget", __version__)
        self._instruments: list[BankHistogram | BankCounter] = []
        self._observed: list[BankObserved] = []
        self._start_ns = time.time_ns()  # cumulative series start when the bank does
        self._delta_start_ns = self._start_ns
        self._take_lock = threading.Lock()

    def histogram(self, name: str, unit: str, description: str, bounds: Sequence[float]) -> BankHistogram:
        """A new histogram in this bank."""
        instrument = BankHistogram(name, unit, description, bounds)
        self._instruments.append(instrument)
        return instrument

    def counter(self, name: str, unit: str, description: str, *, synchronous: bool = True) -> BankCounter:
        """A new monotonic counter in this bank (``synchronous`` False: one the SDK would make observable)."""
        instrument = BankCounter(name, unit, description, synchronous=synchronous)
        self._instruments.append(instrument)
        return instrument

    def observe(self, numbers: Sequence[Observed], callback: Callable[[], Mapping[str, float]]) -> BankObserved:
        """Numbers read from ``callback`` at each collection (counters and gauges), in this bank."""
        observed = BankObserved(numbers, callback)
        self._observed.append(observed)
        return observed

    def collect(self) -> MetricsData | None:
        """Every series so far (cumulative) or since the last collection (delta); None when there is none."""
        with self._take_lock:
            now = time.time_ns()
            delta_start, self._delta_start_ns = self._delta_start_ns, now
            metrics = []
            for instrument in self._instruments:
                temporality = self._temporality(instrument.kind)
                start = delta_start if temporality is AggregationTemporality.DELTA else self._start_ns
                metric = instrument.take(start, now, temporality)
                if metric is not None:
                    metrics.append(metric)
            for observed in self._observed:
                metrics.extend(observed.take(self._start_ns, delta_start, now, self._temporality))
        if not metrics:
            return None
        scope = ScopeMetrics(self._scope, metrics, "")
        return MetricsData([ResourceMetrics(self._resource, [scope], self._resource.schema_url)])


class MetricPusher:
    """Exports a bank's collection every ``interval_s`` from a daemon thread, and once more at shutdown."""

    def __init__(self, bank: MetricBank, exporter: MetricExporter, interval_s: float) -> None:
        self._bank = bank
        self._exporter = exporter
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._export_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="latency-budget-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.export()

    def export(self, timeout_s: float = 10.0) -> bool:
        """Collect and export now; True when there was nothing to send or the exporter took it."""
        data = self._bank.collect()
        if data is None:
            return True
        with self._export_lock:
            try:
                return self._exporter.export(data, timeout_millis=timeout_s * 1000).name == "SUCCESS"
            except Exception as exc:  # an exporter's bug: logged once, the next round tries again
                _guard.log_once(
                    ("metric-export", type(exc)), logging.WARNING, "latency_budget: metric export failed: %r", exc
                )
                return False

    def shutdown(self, timeout_s: float) -> bool:
        """Stop the timer, export what is left and shut the exporter down; True when it all went within the time."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        sent = self.export(max(0.0, deadline - time.monotonic()))
        self._exporter.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
        return sent and time.monotonic() <= deadline
