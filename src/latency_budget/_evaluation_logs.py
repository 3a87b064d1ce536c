"""Evaluation results that arrive as log records, after their call ended: :class:`EvaluationLogProcessor`.

An evaluator that runs after a model call (an LLM judge, a metric computed off the
request path) writes its result as a ``gen_ai.evaluation.result`` log record in the
evaluated call's span context, or naming its ``gen_ai.response.id``. Added to the
application's ``LoggerProvider``, this processor hands those records to a
:class:`~latency_budget.LatencyBudgetProcessor`, whose recent calls join them to the calls
they evaluate (``Baseline.quality``). It reads, never changes, a record; it never raises
and never blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk._logs import LogRecordProcessor

from latency_budget import _guard
from latency_budget._core.quality_reader import EVALUATION_EVENTS, evaluation_of

if TYPE_CHECKING:
    from latency_budget._processor import LatencyBudgetProcessor

__all__ = ["EvaluationLogProcessor"]

_EVENT_NAME = "event.name"  # the SDKs' older spelling of a record's event name


class EvaluationLogProcessor(LogRecordProcessor):
    """Joins evaluation-result log records to the calls of ``processor``'s recent requests.

    >>> logger_provider.add_log_record_processor(EvaluationLogProcessor(budget_processor))

    Records of other events pass by untouched (this processor exports nothing: keep your
    exporting processor beside it). A result is joined by trace and span id, else by
    response id, to a call of a request that has ended, or that ends soon after: results
    that come first wait, a bounded number of them (the processor counts
    those that found no call, or waited too long).
    """

    def __init__(self, processor: LatencyBudgetProcessor) -> None:
        self._recent = processor._recent
        self._recent.join_evaluations()

    def on_emit(self, log_data: Any) -> None:
        """Take an evaluation result (any other record is ignored); never raises."""
        try:
            record = getattr(log_data, "log_record", log_data)
            attributes = getattr(record, "attributes", None)
            if not isinstance(attributes, Mapping):
                return  # no record of the logs SDK's shape: nothing to read
            name = getattr(record, "event_name", None) or attributes.get(_EVENT_NAME)
            if name.__class__ is not str or name not in EVALUATION_EVENTS:
                return
            found = evaluation_of(name, attributes)
            if found is None:
                return
            evaluation, response = found
            trace_id, span_id = getattr(record, "trace_id", None), getattr(record, "span_id", None)
            self._recent.add_evaluation(trace_id or None, span_id or None, response, evaluation)
        except Exception as exc:
            _guard.log_internal_error("evaluation log record", exc)

    def emit(self, log_data: Any) -> None:
        """The name older SDK releases called."""
        self.on_emit(log_data)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered for export."""
        return True
