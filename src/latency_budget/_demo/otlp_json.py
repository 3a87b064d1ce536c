"""The demo's ``--save-traces`` writer: the public file exporter (:mod:`latency_budget.export.file`), one writer."""

from __future__ import annotations

from latency_budget.export.file import OtlpJsonFileSpanExporter, encode_otlp_json

__all__ = ["OtlpJsonLinesExporter", "encode_otlp_json"]

OtlpJsonLinesExporter = OtlpJsonFileSpanExporter
