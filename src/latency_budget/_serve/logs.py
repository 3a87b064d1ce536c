"""OTLP log export requests: the evaluation results they hold, read by the in-process rule.

``serve`` passes log records through to the next hop as the bytes they came as; of the
``gen_ai.evaluation.result`` records among them it reads what
:func:`~latency_budget._core.quality_reader.evaluation_of` reads in process (the
:class:`~latency_budget.EvaluationLogProcessor`'s rule), with the record's trace and span
ids, for the judge's recent calls to join.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from latency_budget._core.quality import Evaluation
from latency_budget._core.quality_reader import EVALUATION_EVENTS, evaluation_of
from latency_budget._serve.otlp import BadRequest, _ids_to_base64, _list

__all__ = ["Found", "evaluations_in", "parse_logs_json"]

_EVENT_NAME = "event.name"  # the SDKs' older spelling of a record's event name
Found = tuple[int | None, int | None, str | None, Evaluation]
"""An evaluation result: its record's trace id and span id (None: none), the response id it names, the result."""


def parse_logs_json(body: bytes) -> bytes:
    """An encoded ``ExportLogsServiceRequest`` from OTLP/JSON (hex trace and span ids)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest("not JSON") from None
    if not isinstance(document, dict):
        raise BadRequest("expected a JSON object with resourceLogs")
    try:
        for resource_logs in _list(document, "resourceLogs", "resource_logs"):
            for scope_logs in _list(resource_logs, "scopeLogs", "scope_logs"):
                for record in _list(scope_logs, "logRecords", "log_records"):
                    _ids_to_base64(record, ("traceId", "trace_id", "spanId", "span_id"))
        message = json_format.ParseDict(document, ExportLogsServiceRequest(), ignore_unknown_fields=True)
    except BadRequest:
        raise
    except Exception as exc:  # json_format.ParseError, and type errors on odd shapes
        raise BadRequest(f"not an OTLP/JSON logs export: {str(exc)[:200]}") from None
    encoded: bytes = message.SerializeToString()
    return encoded


def evaluations_in(body: bytes) -> list[Found]:
    """The evaluation results of an encoded ``ExportLogsServiceRequest`` (BadRequest: not one)."""
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError):
        raise BadRequest("not an OTLP logs export") from None
    found: list[Found] = []
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attributes = {item.key: _value(item.value) for item in record.attributes}
                name = record.event_name or attributes.get(_EVENT_NAME)
                if name.__class__ is not str or name not in EVALUATION_EVENTS:
                    continue
                evaluation = evaluation_of(name, attributes)
                if evaluation is None:
                    continue
                trace_id = int.from_bytes(record.trace_id, "big") if len(record.trace_id) == 16 else 0
                span_id = int.from_bytes(record.span_id, "big") if len(record.span_id) == 8 else 0
                found.append((trace_id or None, span_id or None, evaluation[1], evaluation[0]))
    return found


def _value(value: Any) -> object:
    kind = value.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(value, kind)
    return None  # arrays, maps and bytes: no evaluation key holds one
