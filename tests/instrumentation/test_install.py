"""How budgets get into an SDK that someone else built: the configurator's hook and the post-instrument route."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from latency_budget import LatencyBudgetProcessor, TraceReport, load_budgets
from latency_budget._instrument import Settings
from latency_budget._instrument.install import ExportWrapper, install_on_provider, load_config, mark_installed

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
CONFIG = load_budgets(text="version: 1\ntotal_ms: 100\n")
SETTINGS = Settings("budgets.yaml", logs=False, metrics=False)


class Recorder(SpanProcessor):
    """A processor that keeps the spans it is handed, standing in for a vendor's own processor."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def request(provider: TracerProvider) -> None:
    """One request: a 150 ms root (over its 100 ms total) with one 120 ms chat call."""
    tracer = provider.get_tracer("app")
    root = tracer.start_span("POST /ask", start_time=T0)
    context = trace.set_span_in_context(root)
    chat = tracer.start_span("chat gpt", context=context, attributes={"gen_ai.operation.name": "chat"}, start_time=T0)
    chat.end(end_time=T0 + 120 * MS)
    root.end(end_time=T0 + 150 * MS)
    provider.force_flush()  # the root is held for late spans (late_span_grace_ms) until then, or its grace passes


def violations(span: ReadableSpan) -> int:
    return sum(1 for event in span.events if event.name == "latency_budget.violation")


def exported_root(spans: list[ReadableSpan]) -> ReadableSpan:
    [root] = [span for span in spans if span.name == "POST /ask"]
    return root


def test_exporting_processors_are_wrapped_and_annotate_the_root() -> None:
    """The post-instrument route puts budgets in front of the provider's exporting processor."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reports: list[TraceReport] = []
    assert install_on_provider(provider, CONFIG, SETTINGS, sinks=[reports.append]) == "wrapped"
    request(provider)
    spans = list(exporter.get_finished_spans())
    assert len(spans) == 2
    root = exported_root(spans)
    assert (root.attributes or {})["latency_budget.stages.model_call.count"] == 1
    assert violations(root) == 1
    assert [report.violated for report in reports] == [True]


def test_a_provider_gets_budgets_once() -> None:
    """Installing twice, or on a provider the configurator already did, changes nothing the second time."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert install_on_provider(provider, CONFIG, SETTINGS, sinks=[]) == "wrapped"
    assert install_on_provider(provider, CONFIG, SETTINGS, sinks=[]) == "present"
    configured = TracerProvider()
    mark_installed(configured)
    assert install_on_provider(configured, CONFIG, SETTINGS, sinks=[]) == "present"
    request(provider)
    assert violations(exported_root(list(exporter.get_finished_spans()))) == 1


def test_a_budget_processor_added_in_code_is_respected() -> None:
    """A provider whose processors already include LatencyBudgetProcessor is left alone."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(LatencyBudgetProcessor(CONFIG, SimpleSpanProcessor(exporter)))
    assert install_on_provider(provider, CONFIG, SETTINGS, sinks=[]) == "present"
    request(provider)
    assert violations(exported_root(list(exporter.get_finished_spans()))) == 1


def test_without_exporting_processors_budgets_feed_sinks_and_label_stages_only() -> None:
    """With no SDK exporting processor to wrap, an added processor labels stage spans and reports; roots stay as is."""
    provider = TracerProvider()
    vendor = Recorder()
    provider.add_span_processor(vendor)
    reports: list[TraceReport] = []
    assert install_on_provider(provider, CONFIG, SETTINGS, sinks=[reports.append]) == "added"
    request(provider)
    by_name = {span.name: span for span in vendor.ended}
    assert (by_name["chat gpt"].attributes or {})["latency_budget.stage"] == "model_call"
    assert not any(key.startswith("latency_budget.") for key in by_name["POST /ask"].attributes or {})
    assert [report.total_actual_ms for report in reports] == [150.0]


def test_a_provider_that_is_not_the_sdks_is_not_touched() -> None:
    """The API's proxy provider (no SDK set up) cannot be given budgets."""
    assert install_on_provider(trace.ProxyTracerProvider(), CONFIG, SETTINGS, sinks=[]) == "unavailable"


def test_configurator_hook_feeds_sinks_from_the_first_exporter_only() -> None:
    """Two span exporters get a budget processor each; the sinks hear each trace once."""
    reports: list[TraceReport] = []
    wrapper = ExportWrapper(CONFIG, SETTINGS, SimpleSpanProcessor, sinks=[reports.append])
    provider = TracerProvider()
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    provider.add_span_processor(wrapper(first))
    provider.add_span_processor(wrapper(second))
    request(provider)
    assert len(wrapper.processors) == 2
    assert [report.violated for report in reports] == [True]
    for exporter in (first, second):
        assert violations(exported_root(list(exporter.get_finished_spans()))) == 1


def test_broken_budget_file_turns_budgets_off_with_one_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An unusable budget file logs one error naming file, line and key, and no budgets are installed."""
    broken = tmp_path / "budgets.yaml"
    broken.write_text("version: 1\nstages:\n  model_call: {budget_ms: fast}\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        assert load_config(Settings(str(broken))) is None
        assert load_config(Settings(str(broken))) is None
    [message] = [record.getMessage() for record in caplog.records]
    assert message.startswith(f"latency_budget: OTEL_LATENCY_BUDGET_FILE: {broken}:3: stages.model_call.budget_ms")
    assert message.endswith("; latency budgets are off")
