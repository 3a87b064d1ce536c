"""`latency-budget doctor`: a dialect the table does not know is found, and the rule it prints makes the counts right.

The traces are real SDK spans encoded by the real OTLP encoder. Their vocabulary is left out
of the dialect table on purpose: a framework's own tracer that names its components with a
component-type attribute only (no ``gen_ai.*``, OpenInference or Traceloop key), a chat span
whose first token is under a name the defaults do not read, and a sub-millisecond tool span
with a placeholder tool name beside a real tool call.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from latency_budget import LatencyBudgetProcessor, _guard, load_budgets
from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget._replay import SpanRecord, evaluate_spans, record_of
from latency_budget.cli._doctor import diagnose, merged_fix
from latency_budget.cli._main import main

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
COMPONENT = "acme.component.type"  # the left-out dialect's only key
BUDGETS = "version: 1\ntotal_ms: 60000\n"  # no match rules: the built-in table decides
# opentelemetry-instrumentation-openai-v2 (2.1b0): a chat call's span.
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.system": "openai"}


def _spans(provider: TracerProvider) -> None:
    """One request: a pipeline of components, a chat call with an unread first token, two tool spans."""
    tracer = provider.get_tracer("acme.tracing")

    def run(name: str, start: float, end: float, parent: trace.Span, **attributes: Any) -> None:
        context = trace.set_span_in_context(parent)
        span = tracer.start_span(name, context=context, attributes=attributes, start_time=T0 + int(start * MS))
        span.end(end_time=T0 + int(end * MS))

    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=T0)
    pipeline = tracer.start_span("acme.pipeline.run", trace.set_span_in_context(root), start_time=T0 + MS)
    run("acme.component.run", 2, 40, pipeline, **{COMPONENT: "BM25Retriever", "acme.component.name": "retriever"})
    run("acme.component.run", 40, 41, pipeline, **{COMPONENT: "PromptBuilder", "acme.component.name": "prompt"})
    run("acme.component.run", 41, 300, pipeline, **{COMPONENT: "OpenAIChatGenerator", "acme.component.name": "llm"})
    pipeline.end(end_time=T0 + 301 * MS)
    # The gen_ai keys the table knows, but a first token under a name it does not read (milliseconds).
    run(
        "chat gpt",
        310,
        710,
        root,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt", "acme.ttft_ms": 150.0},
    )
    run(
        "execute_tool lookup", 710, 760, root, **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
    )
    # Bookkeeping after the tool calls: named like one, a placeholder tool name, 0.2 ms long.
    run(
        "execute_tool (noop)",
        760,
        760.2,
        root,
        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "<noop>"},
    )
    root.end(end_time=T0 + 800 * MS)


def _recorded() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _spans(provider)
    return list(exporter.get_finished_spans())


def _counts(budgets: str, spans: list[ReadableSpan]) -> tuple[dict[str, int], float | None]:
    """(stage -> calls, model_call's worst first token) of the recorded request judged under ``budgets``."""
    (report,) = evaluate_spans(load_budgets(text=budgets), [record_of(s) for s in spans])
    return {s.stage: s.count for s in report.stages if s.count}, report.stage("model_call").first_token_ms


def _merge(budgets: str, fix: dict[str, Any]) -> str:
    document = yaml.safe_load(budgets)
    stages = document.setdefault("stages", {})
    for stage, spec in fix["stages"].items():
        stages.setdefault(stage, {}).update(spec)
    return yaml.safe_dump(document, sort_keys=False)


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path, list[ReadableSpan]]:
    spans = _recorded()
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(encode_otlp_json(spans)) + "\n", encoding="utf-8")
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")
    return traces, budgets, spans


def test_doctor_finds_the_left_out_dialect_and_its_rule_makes_the_counts_right(
    recorded: tuple[Path, Path, list[ReadableSpan]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The components, the unread first token and the bookkeeping span are found; the printed YAML fixes all three."""
    traces, budgets, spans = recorded
    assert _counts(BUDGETS, spans) == ({"model_call": 1, "tool_calls": 2}, None)  # wrong without a fix

    assert main(["doctor", str(traces), "--budgets", str(budgets), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    found = {(f["kind"], f["stage"], f["example"]) for f in out["findings"]}
    assert found == {
        ("unstaged", "retrieval", "acme.component.run"),
        ("unstaged", "model_call", "acme.component.run"),
        ("bookkeeping", "tool_calls", "execute_tool (noop)"),
        ("first_token", "model_call", "chat gpt"),
    }
    fixed = _merge(BUDGETS, out["fix"])
    assert _counts(fixed, spans) == ({"retrieval": 1, "model_call": 2, "tool_calls": 1}, 150.0)

    budgets.write_text(fixed, encoding="utf-8")
    assert main(["doctor", str(traces), "--budgets", str(budgets)]) == 0
    assert capsys.readouterr().out.startswith("Nothing missed in 8 spans")


def test_doctor_text_prints_yaml_that_validates(
    recorded: tuple[Path, Path, list[ReadableSpan]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The text output ends with a budget-file fragment that `validate` accepts once added to the file."""
    traces, budgets, _ = recorded
    assert main(["doctor", str(traces), "--budgets", str(budgets)]) == 1
    text = capsys.readouterr().out
    assert "Look like AI calls, in no stage:" in text
    assert "acme.component.type" in text
    fragment = yaml.safe_load(text[text.index("\nstages:") :])
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(_merge(BUDGETS, fragment), encoding="utf-8")
    assert main(["validate", str(fixed)]) == 0


def test_the_processor_counts_ai_spans_in_no_stage_and_names_the_first(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stats() counts spans with a model key that matched no stage; one warning per process names the first."""
    monkeypatch.setattr(_guard, "_seen", set())  # as in a fresh process
    caplog.set_level(logging.WARNING, logger="latency_budget")
    provider = TracerProvider()
    processor = LatencyBudgetProcessor(load_budgets(text=BUDGETS), SimpleSpanProcessor(InMemorySpanExporter()))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("acme")
    for n in range(2):
        with tracer.start_as_current_span(f"POST /{n}", kind=SpanKind.SERVER):
            # An operation name off the convention: it carries a model, in no stage.
            tracer.start_span(
                "completion", attributes={"gen_ai.operation.name": "completions.v2", "gen_ai.request.model": "m"}
            ).end()
            tracer.start_span("db query", attributes={"db.system": "sqlite"}).end()  # no AI key: not counted
            with tracer.start_as_current_span(
                "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "m"}
            ):
                pass  # an agent: a known container, not counted
    assert processor.stats().unstaged_ai_spans == 2
    warnings = [r.getMessage() for r in caplog.records if "in no stage" in r.getMessage()]
    assert len(warnings) == 1  # two such spans, one warning
    assert "'completion'" in warnings[0]
    assert "gen_ai.request.model" in warnings[0]


def test_spans_known_only_by_name_get_a_name_rule() -> None:
    """Tool spans named `tool weather`, `tool time` with no telling key: one `name: 'tool *'` rule stages both."""
    root = SpanRecord(1, 1, None, "POST /ask", T0, T0 + 100 * MS, kind=SpanKind.SERVER)
    chat = SpanRecord(1, 2, 1, "chat", T0, T0 + 50 * MS, attributes={"gen_ai.operation.name": "chat"})
    tools = [
        SpanRecord(1, 3 + n, 1, f"tool {name}", T0 + 50 * MS, T0 + 60 * MS)
        for n, name in enumerate(("weather", "time"))
    ]
    records = [root, chat, *tools]
    config = load_budgets(text=BUDGETS)
    findings = diagnose(config, records)
    assert [(f.kind, f.stage, f.spans) for f in findings] == [("unstaged", "tool_calls", 2)]
    fix = merged_fix(findings, keep=config.stage_names)
    assert fix["stages"]["tool_calls"]["match"][-1] == {"name": "tool *"}
    assert fix["stages"]["model_call"] == fix["stages"]["retrieval"] == {}  # kept, unchanged
    (report,) = evaluate_spans(load_budgets(text=_merge(BUDGETS, fix)), records)
    assert report.stage("tool_calls").count == 2
    assert diagnose(load_budgets(text=_merge(BUDGETS, fix)), records) == []


def test_doctor_output_is_terminal_text_and_its_yaml_reads_back_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile names from traces show no raw ESC, BEL or bidi control; the YAML and JSON fixes read back exactly."""
    payload = "OpenAIChatGenerator\x1b]0;pwned\x07\u202eX\nlatency-budget: OK"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("acme.tracing")
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=T0)
    llm = tracer.start_span(
        "acme.component.run", trace.set_span_in_context(root), attributes={COMPONENT: payload}, start_time=T0 + MS
    )
    llm.end(end_time=T0 + 300 * MS)
    root.end(end_time=T0 + 400 * MS)
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(encode_otlp_json(list(exporter.get_finished_spans()))) + "\n", encoding="utf-8")
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGETS, encoding="utf-8")

    assert main(["doctor", str(traces), "--budgets", str(budgets)]) == 1
    text = capsys.readouterr().out
    assert not any(c in text for c in "\x1b\x07\u202e"), text
    assert "\nlatency-budget: OK" not in text  # no forged line
    fragment = yaml.safe_load(text[text.index("\nstages:") :])
    assert payload in _strings(fragment)  # the rule matches the exact value

    assert main(["doctor", str(traces), "--budgets", str(budgets), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert out.isascii()
    assert payload in _strings(json.loads(out)["fix"])


def _strings(value: object) -> list[str]:
    """Every string in a loaded YAML or JSON document."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def test_a_semantic_kernel_prompt_function_left_out_on_purpose_is_no_finding() -> None:
    """Semantic Kernel's `execute_tool` with no tool call id is vetoed on its scope: doctor proposes nothing for it.

    The same span on another scope is a tool call already; without the veto doctor would call the wrapper a missed tool.
    """
    scope = "semantic_kernel.functions.kernel_function"
    root = SpanRecord(1, 1, None, "POST /ask", T0, T0 + 100 * MS, kind=SpanKind.SERVER)
    bare = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "UbjhsExQkclqmnYh"}
    wrapper = SpanRecord(1, 2, 1, "execute_tool UbjhsExQkclqmnYh", T0, T0 + 90 * MS, scope=scope, attributes=bare)
    chat = SpanRecord(1, 3, 2, "chat gpt", T0, T0 + 40 * MS, scope=scope, attributes={"gen_ai.operation.name": "chat"})
    tool = {**bare, "gen_ai.tool.name": "weather-get_weather", "gen_ai.tool.call.id": "call_1"}
    real = SpanRecord(
        1, 4, 2, "execute_tool weather-get_weather", T0 + 40 * MS, T0 + 50 * MS, scope=scope, attributes=tool
    )
    config = load_budgets(text=BUDGETS)
    assert diagnose(config, [root, wrapper, chat, real]) == []
    (report,) = evaluate_spans(config, [root, wrapper, chat, real])
    assert report.stage("tool_calls").count == 1


def _judged_after_fix(budgets: str, records: list[SpanRecord]) -> dict[str, int]:
    """Doctor's fix pasted into ``budgets`` as a user would, the recording judged again: calls per stage."""
    config = load_budgets(text=budgets)
    fix = merged_fix(diagnose(config, records, base=yaml.safe_load(budgets)), keep=config.stage_names)
    fixed = _merge(budgets, fix) if fix else budgets
    (report,) = evaluate_spans(load_budgets(text=fixed), records)
    return {s.stage: s.count for s in report.stages if s.count}


def test_doctor_never_proposes_a_request_root_as_a_call() -> None:
    """An INTERNAL root naming its model (a script's own span) holds three chats: no rule stages the root."""
    root = SpanRecord(1, 1, None, "answer_question", T0, T0 + 900 * MS, attributes={"acme.model": "gpt-4o-mini"})
    chats = [
        SpanRecord(1, 2 + n, 1, "chat gpt-4o-mini", T0 + n * 300 * MS, T0 + (n * 300 + 250) * MS, attributes=CHAT)
        for n in range(3)
    ]
    records = [root, *chats]
    config = load_budgets(text=BUDGETS)
    assert all(f.example != "answer_question" for f in diagnose(config, records))
    assert _judged_after_fix(BUDGETS, records) == {"model_call": 3}  # three calls were made


def test_doctor_never_puts_one_rule_in_two_stages() -> None:
    """MCP client spans (`tools/call {tool}`, mcp.method.name only), two tools: one rule, in tool_calls, both count."""
    root = SpanRecord(1, 1, None, "POST /ask", T0, T0 + 500 * MS, kind=SpanKind.SERVER)
    chat = SpanRecord(1, 2, 1, "chat", T0, T0 + 100 * MS, attributes=CHAT)
    # The OpenTelemetry MCP conventions' client span, as an SDK-side instrumentation writes it with no gen_ai key.
    tools = [
        SpanRecord(
            1,
            3 + n,
            1,
            f"tools/call {tool}",
            T0 + (100 + n * 100) * MS,
            T0 + (190 + n * 100) * MS,
            kind=SpanKind.CLIENT,
            attributes={"mcp.method.name": "tools/call", "gen_ai.tool.name": tool, "mcp.session.id": "s-1"},
        )
        for n, tool in enumerate(("search_docs", "get_weather"))
    ]
    records = [root, chat, *tools]
    config = load_budgets(text=BUDGETS)
    fix = merged_fix(diagnose(config, records), keep=config.stage_names)
    rules = [
        json.dumps(rule, sort_keys=True) for spec in fix.get("stages", {}).values() for rule in spec.get("match", [])
    ]
    assert len(rules) == len(set(rules))  # no rule in two stages
    assert _judged_after_fix(BUDGETS, records) == {"model_call": 1, "tool_calls": 2}  # two tools ran


def test_doctor_never_stages_what_the_dialect_table_calls_no_call() -> None:
    """Semantic Kernel's prompt-function `execute_tool` (no tool call id) stays out of the rule doctor proposes.

    The file stages its own tools by name, so neither span is staged; the one real tool call (10 ms) is counted
    after the fix, the 90 ms wrapper the table calls no call is not.
    """
    budgets = "version: 1\nstages:\n  model_call: {}\n  tool_calls:\n    match:\n      - name: 'lookup *'\n"
    scope = "semantic_kernel.functions.kernel_function"
    root = SpanRecord(1, 1, None, "POST /ask", T0, T0 + 100 * MS, kind=SpanKind.SERVER)
    bare = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "UbjhsExQkclqmnYh"}
    wrapper = SpanRecord(1, 2, 1, "execute_tool UbjhsExQkclqmnYh", T0, T0 + 90 * MS, scope=scope, attributes=bare)
    chat = SpanRecord(1, 3, 2, "chat gpt", T0, T0 + 40 * MS, scope=scope, attributes=CHAT)
    tool = {**bare, "gen_ai.tool.name": "weather-get_weather", "gen_ai.tool.call.id": "call_1"}
    real = SpanRecord(
        1, 4, 2, "execute_tool weather-get_weather", T0 + 40 * MS, T0 + 50 * MS, scope=scope, attributes=tool
    )
    records = [root, wrapper, chat, real]
    config = load_budgets(text=budgets)
    fix = merged_fix(diagnose(config, records, base=yaml.safe_load(budgets)), keep=config.stage_names)
    fixed = load_budgets(text=_merge(budgets, fix) if fix else budgets)
    (report,) = evaluate_spans(fixed, records)
    assert (report.stage("tool_calls").count, report.stage("tool_calls").actual_ms) == (1, 10.0)
