"""The built-in dialect table: every row classifies, every first-token source is read, the docs agree.

The real libraries that write these attributes run in tests/frameworks (scripts/test-frameworks);
these tests pin the table itself, one synthetic span per row, through a real pipeline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._config.genai_defaults import (
    BUILTIN_STAGES,
    DEFAULT_FIRST_TOKEN,
    DIALECTS,
    NOT_CALLS,
    NotACall,
    builtin_rules,
)
from latency_budget._config.matching import MatchRule, exact_values
from latency_budget._core.first_token import time_to_first_token_ns

from .helpers import T0, at, pipeline

REPO = Path(__file__).resolve().parents[2]
NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"

ROWS = [(d.key, value, stage) for d in DIALECTS for value, stage in d.values.items()]
# A span name each row holds on (a row restricted to some names: its first glob, written out).
NAME_OF = {(d.key, value): d.names[0].replace("*", "x") if d.names else "call" for d in DIALECTS for value in d.values}
LEFT_OUT = [(d.key, value) for d in DIALECTS for value in d.not_stages]


@pytest.mark.parametrize(("key", "value", "stage"), ROWS, ids=[f"{k}={v}" for k, v, _ in ROWS])
def test_each_row_puts_a_span_in_its_stage(key: str, value: str, stage: str) -> None:
    """A span whose start attributes hold a row's key and value is labelled with the row's stage and counted."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    name = NAME_OF[(key, value)]
    p.run(name, 10, 20, parent=root, attributes={key: value})
    root.end(end_time=at(30))
    assert (p.span(name).attributes or {})[attr.STAGE] == stage
    assert (p.span("request").attributes or {})[attr.stage_key(stage, "count")] == 1


@pytest.mark.parametrize(("key", "value"), LEFT_OUT, ids=[f"{k}={v}" for k, v in LEFT_OUT])
def test_agents_workflows_and_chains_stay_out_of_the_stages(key: str, value: str) -> None:
    """Spans that contain calls (agents, workflows, chains, tasks) are in no stage, and pass through untouched."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    p.run("container", 10, 20, parent=root, attributes={key: value})
    root.end(end_time=at(30))
    assert attr.STAGE not in (p.span("container").attributes or {})
    assert p.passed_untouched(p.span("container"))
    assert not any(k.startswith("latency_budget.stages.") for k in p.span("request").attributes or {})


NOT_A_CALL = [(entry.key, value) for entry in NOT_CALLS if entry.scope is None for value in entry.values]
SCOPED_NOT_A_CALL = [entry for entry in NOT_CALLS if entry.scope is not None]


@pytest.mark.parametrize(("key", "value"), NOT_A_CALL, ids=[f"{k}={v}" for k, v in NOT_A_CALL])
@pytest.mark.parametrize(("row_key", "row_value", "stage"), ROWS[:1] + ROWS[-1:])
def test_a_record_that_is_no_call_is_in_no_stage_whatever_else_it_carries(
    key: str, value: str, row_key: str, row_value: str, stage: str
) -> None:
    """A Logfire log span with a chat operation name (a streamed call's record) is no call; its call still is."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    p.run("call", 10, 20, parent=root, attributes={row_key: row_value, "logfire.span_type": "span"})
    p.run("record", 20, 20, parent=root, attributes={row_key: row_value, key: value})
    root.end(end_time=at(30))
    assert (p.span("call").attributes or {})[attr.STAGE] == stage
    assert attr.STAGE not in (p.span("record").attributes or {})
    assert p.passed_untouched(p.span("record"))
    assert (p.span("request").attributes or {})[attr.stage_key(stage, "count")] == 1


@pytest.mark.parametrize("entry", SCOPED_NOT_A_CALL, ids=[f"{e.scope}:{e.key}" for e in SCOPED_NOT_A_CALL])
def test_a_scoped_no_call_row_holds_on_its_scope_only(entry: NotACall) -> None:
    """On its scope a span with the row's value (None: without the key) is in no stage; on another it is a call."""
    config = load_budgets(text=NO_MATCH_RULES)
    classify = config.classifier.classify
    assert entry.scope is not None
    row_key, row_value, stage = next(row for row in ROWS if row[2] == "tool_calls")
    call = {row_key: row_value}
    vetoed = dict(call) if None in entry.values else {**call, entry.key: next(v for v in entry.values if v)}
    kept = {**call, entry.key: "call_1"} if None in entry.values else dict(call)
    stages = [s.name for s in config.default.stages]
    for _ in range(2):  # the second time from the classifier's cache
        assert classify("x", SpanKind.INTERNAL, entry.scope, vetoed) == -1
        assert classify("x", SpanKind.INTERNAL, entry.scope, kept) == stages.index(stage)
        assert classify("x", SpanKind.INTERNAL, entry.scope + ".other", vetoed) == stages.index(stage)
        assert classify("x", SpanKind.INTERNAL, "other", vetoed) == stages.index(stage)


def test_a_vetoed_builtin_rule_leaves_the_span_to_a_later_stage() -> None:
    """The veto settles only the built-in rule: a custom stage after it still matches the span."""
    config = load_budgets(
        text="version: 1\nstages:\n  model_call: {budget_ms: 100}\n"
        "  logs: {budget_ms: 100, match: {attributes: {logfire.span_type: log}}}\n"
    )
    classify = config.classifier.classify
    stages = [s.name for s in config.default.stages]
    chat = {"gen_ai.operation.name": "chat"}
    assert classify("x", SpanKind.INTERNAL, "s", chat) == stages.index("model_call")
    assert classify("x", SpanKind.INTERNAL, "s", {**chat, "logfire.span_type": "log"}) == stages.index("logs")
    assert classify("x", SpanKind.INTERNAL, "s", {**chat, "logfire.span_type": ["log"]}) == stages.index("model_call")


def test_a_veto_needs_a_condition_beside_it() -> None:
    """A rule made only of vetoes would match every span: it is refused when built."""
    with pytest.raises(ValueError, match="unless"):
        MatchRule(unless=(("logfire.span_type", exact_values(["log"])),))


def test_a_value_set_only_at_the_end_still_classifies() -> None:
    """OpenInference's pydantic-ai processor adds openinference.span.kind at the end: the span still counts."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    tool = p.start("execute_tool weather", 10, parent=root)
    tool.set_attribute("openinference.span.kind", "TOOL")
    tool.end(end_time=at(20))
    root.end(end_time=at(30))
    assert (p.span("execute_tool weather").attributes or {})[attr.STAGE] == "tool_calls"
    assert (p.span("request").attributes or {})[attr.stage_key("tool_calls", "count")] == 1


def test_values_are_case_and_type_exact() -> None:
    """`llm` is not OpenInference's `LLM`, and a non-string value never matches."""
    config = load_budgets(text=NO_MATCH_RULES)
    classify = config.classifier.classify
    assert classify("x", SpanKind.INTERNAL, "s", {"openinference.span.kind": "llm"}) == -1
    assert classify("x", SpanKind.INTERNAL, "s", {"langfuse.observation.type": ("generation",)}) == -1
    assert classify("x", SpanKind.INTERNAL, "s", {"openinference.span.kind": "LLM"}) >= 0


def test_every_builtin_rule_is_a_single_attribute_condition_or_a_probe() -> None:
    """Each built-in rule tests one key (with at most a span-name veto) or is a probe beside the index.

    That keeps classification one dictionary probe per key: the decision for a span with a
    dialect key keeps its index, and the probes (URL, class-name endings) run only on spans
    carrying the keys they read.
    """
    for stage in BUILTIN_STAGES:
        rules = builtin_rules(stage) or ()
        assert rules
        for r in rules:
            if r.probe is None:
                assert len(r.attributes) == 1
                assert not r.exists
                assert r.kind is None
                assert r.name is None or r.name.pattern.startswith(("(?!", "(?:"))
            else:
                assert not r.attributes
                assert not r.exists
                assert not r.unless
    config = load_budgets(text=NO_MATCH_RULES)
    decision = config.classifier.prepare("POST", SpanKind.CLIENT, "s")
    assert not isinstance(decision, int)
    assert decision.index is not None
    assert decision.by_probe
    other = config.classifier.prepare("GET profile", SpanKind.CLIENT, "s")  # no probe reads its URL
    assert not isinstance(other, int)
    assert not other.by_probe
    assert other.gate is not None
    assert "url.full" not in other.gate


def test_no_value_means_two_stages() -> None:
    """Across dialects that share a key, one value names one stage (or none)."""
    meaning: dict[tuple[str, str], set[str]] = {}
    for dialect in DIALECTS:
        for value, stage in dialect.values.items():
            meaning.setdefault((dialect.key, value), set()).add(stage)
        for value in dialect.not_stages:
            meaning.setdefault((dialect.key, value), set()).add("")
    assert {key: stages for key, stages in meaning.items() if len(stages) > 1} == {}


def _documented_table() -> dict[tuple[str, str], set[str]]:
    """(stage, key) -> values of the built-in matcher tables in docs/budget-file.md (dialects, general conventions)."""
    text = (REPO / "docs" / "budget-file.md").read_text(encoding="utf-8")
    table: dict[tuple[str, str], set[str]] = {}
    for title in ("**Built-in GenAI matchers.**", "**General conventions, below the dialects.**"):
        section = text.split(title, 1)[1].split("\n\n", 2)[1]
        lines = [line for line in section.splitlines() if line.startswith("|")]
        header = [cell.strip().strip("`") for cell in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            stage = cells[0].strip("`")
            for key, cell in zip(header[1:], cells[1:], strict=True):
                values = set(re.findall(r"`([^`]+)`", cell))
                if values:
                    table.setdefault((stage, key), set()).update(values)
    return table


def test_the_documented_table_is_the_dialect_table() -> None:
    """The built-in matcher table of docs/budget-file.md lists exactly the values the defaults use."""
    expected: dict[tuple[str, str], set[str]] = {}
    for dialect in DIALECTS:
        for value, stage in dialect.values.items():
            expected.setdefault((stage, dialect.key), set()).add(value)
    assert _documented_table() == expected


# -- time to first token -----------------------------------------------------------------------


def _ttft(attributes: dict[str, object], events: list[object] | None = None) -> int | None:
    return time_to_first_token_ns(DEFAULT_FIRST_TOKEN, T0, attributes, lambda _: events or [], None)


@pytest.mark.parametrize("key", ["gen_ai.client.operation.time_to_first_chunk", "gen_ai.response.time_to_first_chunk"])
def test_time_to_first_chunk_in_seconds_is_read_under_the_current_and_the_deprecated_name(key: str) -> None:
    """pydantic-ai/Logfire's attribute and the deprecated semconv one are both seconds from the span's start."""
    assert _ttft({key: 0.0193}) == 19_300_000


def test_the_current_name_wins_over_the_deprecated_one() -> None:
    """A span that carries both names is read from gen_ai.client.operation.time_to_first_chunk."""
    both = {"gen_ai.client.operation.time_to_first_chunk": 0.2, "gen_ai.response.time_to_first_chunk": 0.5}
    assert _ttft(both) == 200_000_000


@pytest.mark.parametrize(
    ("text", "offset_ns"),
    [
        ('"2023-11-14T22:13:20.317482Z"', 317_482_000),  # what Langfuse 5 writes: JSON-quoted, Z, microseconds
        ("2023-11-14T22:13:20.317482+00:00", 317_482_000),
        ("2023-11-14T23:13:20.5+01:00", 500_000_000),
        ("2023-11-14T16:43:20.123456789-0530", 123_456_789),  # nanoseconds, offset without a colon
        ("2023-11-14 22:13:21Z", 1_000_000_000),
        ('"2023-11-14T22:13:20.000000001Z"', 1),
    ],
)
def test_langfuse_completion_start_time_is_an_instant_on_the_spans_clock(text: str, offset_ns: int) -> None:
    """The ISO-8601 completion start (quoted or not, any zone, any precision) minus the span's start."""
    assert T0 == 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z, the instant the texts are written against
    assert _ttft({"langfuse.observation.completion_start_time": text}) == offset_ns


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-14T22:13:20.3",  # no zone: cannot be placed on the span's clock
        '"2023-11-14T22:13:20Z',  # unbalanced quote
        "2023-02-30T00:00:00Z",
        "2023-11-14T24:00:00Z",
        "2023-11-14T22:13:20+25:00",
        "2023-11-14T22:13:20Zjunk",
        "2023-11-14T22:13:19Z",  # before the span started
        "yesterday",
    ],
)
def test_unusable_completion_start_times_are_ignored(text: str) -> None:
    """A malformed, zoneless, impossible or too early instant gives no first token, never an error."""
    assert _ttft({"langfuse.observation.completion_start_time": text}) is None


ODD = [7, True, 0.5, float("nan"), "", "x" * 100_000, b"LLM", (), ("LLM", "TOOL"), (1, 2)]
KEYS = sorted({d.key for d in DIALECTS} | {s.attribute for s in DEFAULT_FIRST_TOKEN if s.attribute})


@pytest.mark.parametrize("key", KEYS)
def test_odd_values_under_the_dialect_keys_are_no_stage_and_no_error(key: str) -> None:
    """Numbers, bytes, sequences, huge strings under a dialect or first-token key: no stage, no first token."""
    chat = {"openinference.span.kind": "LLM"} if key == "gen_ai.operation.name" else {"gen_ai.operation.name": "chat"}
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    for i, value in enumerate(ODD):
        p.run(f"odd-{i}", 1, 2, parent=root, attributes={**chat, key: value})
    root.end(end_time=at(30))
    exported = p.finished()
    assert len(exported) == len(ODD) + 1
    assert all((s.attributes or {}).get(attr.STAGE) == "model_call" for s in exported if s.name.startswith("odd-"))
    request = dict(p.span("request").attributes or {})
    assert request[attr.stage_key("model_call", "count")] == len(ODD)
    if key.startswith("gen_ai.") and ("first_chunk" in key or "first_token" in key):
        # 7, True->skipped (bool), 0.5: numbers in seconds are first tokens; the rest are ignored.
        assert request[attr.stage_key("model_call", "worst_first_token_ms")] == 7_000.0
    elif key == "ttft_ms":
        # Claude Code's spelling, in milliseconds: 7 and 0.5 are first tokens, the worst 7 ms.
        assert request[attr.stage_key("model_call", "worst_first_token_ms")] == 7.0
    else:
        assert attr.stage_key("model_call", "worst_first_token_ms") not in request
