"""The attributes the latency levers read come from one table: the ``call_keys`` column of DIALECTS.

Adding a spelling to a dialect's ``CallKeys`` makes ``call_of`` (and the samples the
recent-call series keep) read it; writing one into ``_core/call_facts.py`` instead fails
the source test below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from latency_budget._config.genai_defaults import (
    CALL_KEYS,
    DIALECTS,
    GENERATION_VALUES,
    TOOL_CALL_FINISH_REASONS,
    CallKeys,
)
from latency_budget._core import call_facts
from latency_budget._core.call_facts import SAMPLE_FIELDS, RecordedCalls, call_of, sample_of

# (dialect, column, key) for every spelling of the table.
SPELLINGS = [
    (dialect.source, column, key)
    for dialect in DIALECTS
    for column in CallKeys.__slots__
    if column != "generation"
    for key in getattr(dialect.call_keys, column)
]
IDS = [f"{source}:{column}:{key}" for source, column, key in SPELLINGS]


def _read(attributes: dict[str, object], *, ttft: int | None = None) -> call_facts.Call:
    return call_of(7, "model_call", 0, 1_000_000, ttft, attributes)


@pytest.mark.parametrize(("source", "column", "key"), SPELLINGS, ids=IDS)
def test_every_spelling_in_the_table_is_read(source: str, column: str, key: str) -> None:
    """A span whose only spelling of a fact is this key gets that fact from it."""
    model: dict[str, object] = {} if column == "model" else {CALL_KEYS.model[-1]: "m"}
    if (
        column in ("output_tokens", "stream", "finish_reasons", "reasoning_tokens", "reasoning_level")
        or "cache" in column
    ):
        model.update(_GENERATION)  # read of generation calls only (see the test below)
    if column in ("tool_name", "data_source"):
        # What a call without a model called: read on a span with arguments (the only
        # spans without a model that a lever reads, for the cache lever's targets).
        model = {CALL_KEYS.arguments[0]: '{"id": 7}'}
    if column == "model":
        assert _read({key: "gpt"}).model == "gpt"
    elif column == "response_model":
        assert _read({**model, key: "gpt-2024"}).response_model == "gpt-2024"
    elif column == "provider":
        assert _read({**model, key: "acme"}).provider == "acme"
    elif column == "input_tokens":
        assert _read({**model, key: 42}).input_tokens == 42
    elif column == "output_tokens":
        assert _read({**model, key: 43}).output_tokens == 43
    elif column == "tool_name":
        assert _read({**model, key: "lookup"}).target == "lookup"
    elif column == "data_source":
        assert _read({**model, key: "kb"}).target == "kb"
    elif column == "arguments":
        assert _read({**model, key: '{"q": 1}'}).key is not None
    elif column == "results":
        with_args = {**model, CALL_KEYS.arguments[0]: "same"}
        assert _read(with_args).result is None
        assert None is not _read({**with_args, key: "one"}).result != _read({**with_args, key: "two"}).result
    elif column == "instructions":
        with_args = {**model, CALL_KEYS.arguments[0]: "same"}
        assert _read({**with_args, key: "be brief"}).key != _read(with_args).key
    elif column == "stream":
        assert _read({**model, key: True}).streamed
        assert not _read(model).streamed
    elif column == "finish_reasons":
        # Every reason of the one list (TOOL_CALL_FINISH_REASONS, which the first-token rule
        # reads too) marks a call that asked for tools: the conventions' own is `tool_call`.
        for reason in sorted(TOOL_CALL_FINISH_REASONS):
            assert _read({**model, key: (reason,)}).to_tools, reason
        assert not _read({**model, key: ("stop",)}).to_tools
    elif column in ("cached_input_tokens", "cache_creation_input_tokens"):
        # A share of the input tokens: read beside an input count, never beyond it.
        with_input = {**model, CALL_KEYS.input_tokens[0]: 100}
        assert getattr(_read({**with_input, key: 60}), column) == 60
        assert getattr(_read({**with_input, key: 160}), column) is None
        assert getattr(_read({**model, key: 60}), column) is None
    elif column == "reasoning_tokens":  # counted within the output tokens: read where those are
        assert _read({**model, CALL_KEYS.output_tokens[0]: 50, key: 44}).reasoning_tokens == 44
        assert _read({**model, key: 44}).reasoning_tokens is None
    elif column == "reasoning_level":  # read where the call records its reasoning
        reasoned = {**model, CALL_KEYS.output_tokens[0]: 50, CALL_KEYS.reasoning_tokens[0]: 9}
        assert _read({**reasoned, key: "low"}).reasoning_level == "low"
        assert _read({**model, key: "low"}).reasoning_level is None
    else:  # a new column: say how it is read here
        pytest.fail(f"{source}: column {column!r} of CallKeys has no test")


# A chat call, in the conventions' spelling: what makes a span a generation call.
_GENERATION = {GENERATION_VALUES[0][0]: sorted(GENERATION_VALUES[0][1])[0]}


def test_output_streaming_and_finish_reasons_are_read_of_generation_calls_only() -> None:
    """Only a generation's levers (streaming, output length) read them: another call's are not read."""
    facts = {CALL_KEYS.model[0]: "m", CALL_KEYS.output_tokens[0]: 43, CALL_KEYS.stream[0]: True}
    facts[CALL_KEYS.finish_reasons[0]] = (sorted(TOOL_CALL_FINISH_REASONS)[0],)
    generation = _read({**facts, **_GENERATION})
    assert (generation.generation, generation.output_tokens, generation.streamed, generation.to_tools) == (
        True,
        43,
        True,
        True,
    )
    other = _read({**facts, GENERATION_VALUES[0][0]: "embeddings"})
    assert (other.generation, other.output_tokens, other.streamed, other.to_tools) == (False, None, False, False)
    assert _read({**facts, GENERATION_VALUES[0][0]: "embeddings"}, ttft=5).streamed  # a first token still counts


def test_the_merged_columns_keep_the_table_order_without_repeats() -> None:
    """CALL_KEYS lists each column's keys in DIALECTS order: the first a span carries wins."""
    for column in CallKeys.__slots__:
        if column == "generation":
            continue
        merged = tuple(dict.fromkeys(key for d in DIALECTS for key in getattr(d.call_keys, column)))
        assert getattr(CALL_KEYS, column) == merged, column
    both = {"gen_ai.request.model": "semconv", "llm.model_name": "openinference"}
    assert _read(both).model == "semconv"


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d.call_keys.generation], ids=lambda d: d.source)
def test_every_generation_dialect_names_generation_calls(dialect: object) -> None:
    """A dialect marked ``generation`` makes its model_call values generation calls (they can stream)."""
    key = dialect.key  # type: ignore[attr-defined]
    values = dialect.stages["model_call"]  # type: ignore[attr-defined]
    assert (key, frozenset(values)) in GENERATION_VALUES
    for value in values:
        assert _read({"gen_ai.request.model": "m", key: value}).generation
    assert not _read({"gen_ai.request.model": "m", key: "not-a-generation"}).generation


def test_call_facts_spells_no_attribute_of_its_own() -> None:
    """call_facts.py names no attribute key: every spelling it reads comes from the table."""
    tree = ast.parse(Path(call_facts.__file__).read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    dotted = re.compile(r"^[a-z_]+(\.[a-z0-9_]+)+$")
    found = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and dotted.match(node.value)
    ]
    assert found == []


def test_recorded_calls_read_the_same_facts_as_call_of() -> None:
    """The samples the series keep and the calls a report carries are one reading of the spans."""
    chat = {"gen_ai.operation.name": "chat", "llm.model_name": "m", "llm.token_count.prompt": 5, "input.value": "q"}
    other = {"gen_ai.operation.name": "chat"}
    raw = [
        (2, "model_call", 50, 90, None, chat),
        (1, "model_call", 10, 40, 5, other),
        (3, "model_call", 10, 30, None, dict(chat)),
    ]
    calls = RecordedCalls(raw)
    assert calls  # without building them
    (first, second) = calls.samples  # in start order, then end: the spans with a model or arguments
    built = [c for c in calls if c.model is not None]
    assert [(c.start_ns, c.end_ns) for c in built] == [(first[2], first[3]), (second[2], second[3])]
    for sample, call in zip((first, second), built, strict=True):
        assert sample == sample_of(call)
        for index, field in enumerate(SAMPLE_FIELDS):
            assert sample[index] == getattr(call, field), field
    assert len(calls) == 3
    assert calls == tuple(calls)
    assert calls.calls() == call_facts.calls_of(raw)  # built from the samples: as if each span were read again
    assert not RecordedCalls([(1, "model_call", 10, 40, None, other)])
    assert RecordedCalls([(1, "model_call", 10, 40, None, other)]) == ()
