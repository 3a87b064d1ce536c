"""The stage label written at a span's start behaves exactly as ``set_attributes`` would.

The processor writes ``latency_budget.stage`` and ``budget_ms`` on live stage spans by a
fast path (``_sdk_internals.set_label``) that hands every case it does not cover to the
SDK. These tests compare what is exported against a twin span labelled through the
public ``set_attributes``, under the span limits where the two could differ.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.types import AttributeValue

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget import _attributes as attr

from .helpers import TECHCORP_YAML, at, op

# Matched by name, so that attribute limits cannot change which stage the span is in.
BY_NAME_YAML = """
version: 1
stages:
  retrieval: {budget_ms: 100, match: {name: "retrieve"}}
"""
LABEL: dict[str, AttributeValue] = {attr.STAGE: "retrieval", attr.STAGE_BUDGET_MS: 100.0}


def export_pair(limits: SpanLimits, attributes: Mapping[str, AttributeValue]) -> tuple[ReadableSpan, ReadableSpan]:
    """A retrieval span labelled by the processor, and its twin labelled by set_attributes, as exported."""
    exporter = InMemorySpanExporter()
    processor = LatencyBudgetProcessor(
        load_budgets(text=BY_NAME_YAML), SimpleSpanProcessor(exporter), late_span_grace_ms=0
    )
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    root = tracer.start_span("request", start_time=at(0))
    context = trace.set_span_in_context(root)
    labelled = tracer.start_span("retrieve", context, attributes=attributes, start_time=at(0))
    labelled.end(end_time=at(10))
    twin_provider = TracerProvider(span_limits=limits)
    twin_exporter = InMemorySpanExporter()
    twin_provider.add_span_processor(SimpleSpanProcessor(twin_exporter))
    twin = twin_provider.get_tracer("tests").start_span("retrieve", attributes=attributes, start_time=at(0))
    twin.set_attributes(LABEL)
    twin.end(end_time=at(10))
    root.end(end_time=at(20))
    (exported,) = [s for s in exporter.get_finished_spans() if s.name == "retrieve"]
    (expected,) = twin_exporter.get_finished_spans()
    return exported, expected


@pytest.mark.parametrize(
    ("limits", "attributes"),
    [
        (SpanLimits(), {"db.system.name": "pgvector", "db.namespace": "docs"}),
        # Full: the SDK drops the oldest attributes to make room, and counts them.
        (SpanLimits(max_span_attributes=3), {"a": 1, "b": 2}),
        (SpanLimits(max_span_attributes=2), {}),
        # Room for exactly the label.
        (SpanLimits(max_span_attributes=4), {"a": 1}),
        # A value length limit truncates the stage name.
        (SpanLimits(max_span_attribute_length=4), {"a": "long value"}),
        # No attributes allowed at all.
        (SpanLimits(max_span_attributes=0), {"a": 1}),
    ],
    ids=["room", "full", "full-before-label", "exact-room", "length-limit", "no-attributes"],
)
def test_label_equals_what_set_attributes_gives(limits: SpanLimits, attributes: Mapping[str, AttributeValue]) -> None:
    """Exported attributes (in order) and the dropped count equal a twin labelled by set_attributes."""
    exported, expected = export_pair(limits, attributes)
    assert list((exported.attributes or {}).items()) == list((expected.attributes or {}).items())
    assert exported.dropped_attributes == expected.dropped_attributes


def test_label_is_visible_on_the_live_span() -> None:
    """Other processors and the application see the label on the live span, before it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(
        LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), SimpleSpanProcessor(exporter), late_span_grace_ms=0)
    )
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("request"), tracer.start_as_current_span("chat", attributes=op("chat")) as chat:
        assert isinstance(chat, ReadableSpan)
        assert dict(chat.attributes or {}) == {**op("chat"), attr.STAGE: "model_call", attr.STAGE_BUDGET_MS: 800.0}


def test_copies_of_copies_keep_the_dropped_counts() -> None:
    """Two processors in a chain: the root, copied twice, still reports what the SDK dropped."""
    exporter = InMemorySpanExporter()
    budgets = load_budgets(text=TECHCORP_YAML)
    inner = LatencyBudgetProcessor(budgets, SimpleSpanProcessor(exporter), late_span_grace_ms=0)
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2))
    provider.add_span_processor(LatencyBudgetProcessor(budgets, inner, late_span_grace_ms=0))
    root = provider.get_tracer("tests").start_span(
        "request", attributes={"a": 1, "b": 2, "c": 3, "d": 4}, kind=trace.SpanKind.SERVER
    )
    root.end()
    (exported,) = exporter.get_finished_spans()
    assert isinstance(root, ReadableSpan)
    assert root.dropped_attributes == 2
    assert exported.dropped_attributes == 2
    assert exported is not root
    assert (exported.attributes or {})[attr.VIOLATED] is False


def test_span_whose_label_its_limits_dropped_is_still_counted() -> None:
    """A name-matched stage span with no room for the label is still in the root's report."""
    exporter = InMemorySpanExporter()
    processor = LatencyBudgetProcessor(
        load_budgets(text=BY_NAME_YAML), SimpleSpanProcessor(exporter), late_span_grace_ms=0
    )
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=1))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    root = tracer.start_span("request", start_time=at(0))
    labelled = tracer.start_span("retrieve", trace.set_span_in_context(root), attributes={"a": 1}, start_time=at(0))
    labelled.end(end_time=at(150))
    root.end(end_time=at(200))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert attr.STAGE not in (spans["retrieve"].attributes or {})
    root_attributes = spans["request"].attributes or {}
    assert root_attributes[attr.stage_key("retrieval", "count")] == 1
    assert root_attributes[attr.OVER_BUDGET_STAGES] == ("retrieval", "total")
