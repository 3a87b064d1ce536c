"""Huge and countless span names: the classifier's cache stays small in bytes, and classification stays right."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from latency_budget import LatencyBudgetProcessor, load_budgets

from .helpers import at

BUDGETS = "version: 1\nstages:\n  work:\n    budget_ms: 100\n    match: {name: 'work*'}\n"
NAME_BYTES = 1_000_000
NAMES = 100  # 100 MB of names, if anything kept them


class Discard(SpanExporter):
    """An exporter that keeps nothing, so only the processor could keep a span's name alive."""

    def __init__(self) -> None:
        self.labels: list[object] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.labels.extend(dict(span.attributes or {}).get("latency_budget.stage") for span in spans)
        return SpanExportResult.SUCCESS


def test_megabyte_span_names_are_classified_but_not_kept() -> None:
    """100 distinct 1 MB span names go through the processor: each is labelled, and none stays in memory."""
    exporter = Discard()
    provider = TracerProvider()
    # Each span is a root, judged at its end (no grace for late spans: holding a root is memory
    # bounded in time, tested apart in test_late_children.py).
    processor = LatencyBudgetProcessor(load_budgets(text=BUDGETS), SimpleSpanProcessor(exporter), late_span_grace_ms=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    gc.collect()
    tracemalloc.start()
    try:
        for n in range(NAMES):
            name = f"work {n} " + "x" * NAME_BYTES
            tracer.start_span(name, start_time=at(0)).end(end_time=at(10))
            del name
        gc.collect()
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exporter.labels == ["work"] * NAMES
    assert retained < 10 * NAME_BYTES  # kept names would be NAMES * NAME_BYTES = 100 MB
    provider.shutdown()


def test_countless_names_share_the_cached_decisions() -> None:
    """20,000 distinct names that 30 attribute rules leave undecided retain about a megabyte, not one decision each."""
    budgets = "version: 1\nstages:\n" + "".join(
        f"  s{n}:\n    budget_ms: 100\n    match: {{name: 'work*', attributes: {{k{n}: [a, b, c]}}}}\n"
        for n in range(30)
    )
    classifier = load_budgets(text=budgets).classifier
    gc.collect()
    tracemalloc.start()
    try:
        stages = {classifier.classify(f"work {n:06d}", SpanKind.INTERNAL, "s", {"k3": "a"}) for n in range(20_000)}
        gc.collect()
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stages == {3}
    assert retained < 10_000_000  # one decision per cached name (4,096 of them) was about 54 MB
