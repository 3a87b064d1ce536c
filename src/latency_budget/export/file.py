"""Record spans (and log records) to a file as OTLP JSON lines, the format ``check`` and ``report`` read.

Each line is one ``ExportTraceServiceRequest`` (or ``ExportLogsServiceRequest``) in the
OTLP/JSON encoding, as the Collector's file exporter writes it: the SDK's own protobuf
encoder, rendered by ``google.protobuf.json_format`` with the two differences the OTLP
specification makes from plain protobuf JSON: trace and span ids are hex strings, not
base64, and enums are integers. 64-bit integers, such as ``startTimeUnixNano``, are
strings, as protobuf JSON writes them.

>>> recording = BatchSpanProcessor(OtlpJsonFileSpanExporter("traces.jsonl"))
>>> provider.add_span_processor(LatencyBudgetProcessor(config, recording))

A span exporter and a log exporter given the same :class:`OtlpJsonLinesFile` share it, so
both signals land in one file whole line by whole line, as a Collector whose traces and
logs pipelines end in one file exporter writes them; ``check`` and ``report`` read the
spans and pass over the log lines.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import export as _logs_export
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter as _LogExporter
    from opentelemetry.sdk._logs.export import LogRecordExportResult as _LogResult
else:  # named LogExporter and LogExportResult before SDK 1.39
    _LogExporter = getattr(_logs_export, "LogRecordExporter", None) or _logs_export.LogExporter
    _LogResult = getattr(_logs_export, "LogRecordExportResult", None) or _logs_export.LogExportResult

__all__ = [
    "OtlpJsonFileLogExporter",
    "OtlpJsonFileSpanExporter",
    "OtlpJsonLinesFile",
    "encode_otlp_json",
    "encode_otlp_json_logs",
]

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One ``ExportTraceServiceRequest`` for ``spans`` as an OTLP/JSON object."""
    document: dict[str, Any] = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return document


def encode_otlp_json_logs(batch: Sequence[Any]) -> dict[str, Any]:
    """One ``ExportLogsServiceRequest`` for the SDK's log records (``ReadableLogRecord`` or ``LogData``)."""
    document: dict[str, Any] = json_format.MessageToDict(encode_logs(batch), use_integers_for_enums=True)
    for resource_logs in document.get("resourceLogs", ()):
        for scope_logs in resource_logs.get("scopeLogs", ()):
            for record in scope_logs.get("logRecords", ()):
                _hex_ids(record)
    return document


def _hex_ids(item: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()


class OtlpJsonLinesFile:
    """A file that whole OTLP/JSON lines are written to, by one or more exporters, from any thread.

    ``append=True`` (the default) keeps what the file holds, so a restarted application adds
    to its recording; ``append=False`` starts it afresh. Each line is flushed as it is
    written, so a recording is readable while the application runs and after it dies.
    The file is closed when the last exporter sharing it shuts down.
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = True) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._users = 0
        self._file: TextIO | None = open(self.path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - closed by release()

    def acquire(self) -> OtlpJsonLinesFile:
        """Count one more exporter writing here."""
        with self._lock:
            self._users += 1
        return self

    def write(self, document: dict[str, Any]) -> bool:
        """Append ``document`` as one line; False once the file is closed or when the write failed."""
        line = json.dumps(document, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                return False
            try:
                self._file.write(line)
                self._file.flush()
            except OSError:
                return False
        return True

    def flush(self) -> None:
        """Flush what is buffered (lines are flushed as written; this is for symmetry with exporters)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def release(self) -> None:
        """One exporter is done; the last one closes the file. Safe to call more often."""
        with self._lock:
            self._users -= 1
            if self._users <= 0 and self._file is not None:
                self._file.close()
                self._file = None


def _shared(target: str | os.PathLike[str] | OtlpJsonLinesFile, append: bool) -> OtlpJsonLinesFile:
    file = target if isinstance(target, OtlpJsonLinesFile) else OtlpJsonLinesFile(target, append=append)
    return file.acquire()


class _FileExporter:
    """What the span and log exporters share: their hold on the file, the writing of a batch, the end."""

    def __init__(self, target: str | os.PathLike[str] | OtlpJsonLinesFile, *, append: bool = True) -> None:
        self._file = _shared(target, append)
        self._done = False

    @property
    def path(self) -> str:
        """The file written."""
        return self._file.path

    def _write(self, batch: Sequence[Any], encode: Callable[[Sequence[Any]], dict[str, Any]]) -> bool:
        """Write ``batch`` as one line (nothing when it is empty); False after shutdown or when the write failed."""
        if self._done:
            return False
        return not batch or self._file.write(encode(batch))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._file.flush()
        return True

    def shutdown(self) -> None:
        if not self._done:
            self._done = True
            self._file.release()


class OtlpJsonFileSpanExporter(_FileExporter, SpanExporter):
    """A span exporter that appends one OTLP/JSON line per export call to a file.

    ``target`` is a path (opened at once: an unwritable path raises ``OSError`` here, not on
    the first export) or an :class:`OtlpJsonLinesFile` shared with a log exporter.
    """

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS if self._write(spans, encode_otlp_json) else SpanExportResult.FAILURE


class OtlpJsonFileLogExporter(_FileExporter, _LogExporter):
    """A log record exporter that appends one OTLP/JSON line per export call to a file (see the span exporter)."""

    def export(self, batch: Sequence[Any]) -> _LogResult:
        return _LogResult.SUCCESS if self._write(batch, encode_otlp_json_logs) else _LogResult.FAILURE
