"""Write spans as OTLP JSON lines, the format of the Collector's file exporter.

Each line is one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding: the SDK's own
protobuf encoder, rendered by ``google.protobuf.json_format`` with the two differences
the OTLP specification (and the Collector) make from plain protobuf JSON: trace and span
ids are hex strings, not base64, and enums are integers. 64-bit integers, such as
``startTimeUnixNano``, are strings, as protobuf JSON writes them.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["OtlpJsonLinesExporter", "encode_otlp_json"]

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One ``ExportTraceServiceRequest`` for ``spans`` as an OTLP/JSON object."""
    message = encode_spans(spans)
    document: dict[str, Any] = json_format.MessageToDict(message, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return document


def _hex_ids(item: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()


class OtlpJsonLinesExporter(SpanExporter):
    """A span exporter that appends one OTLP/JSON line per export call to a file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._lock = threading.Lock()
        self._file: TextIO | None = open(self._path, "w", encoding="utf-8")  # noqa: SIM115 - closed in shutdown()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = json.dumps(encode_otlp_json(spans), separators=(",", ":"))
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            self._file.write(line + "\n")
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
