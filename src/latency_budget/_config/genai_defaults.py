"""Built-in matchers and first-token sources for what AI instrumentations emit.

A stage named ``retrieval``, ``model_call`` or ``tool_calls`` that has no ``match`` key
uses these rules. They are data: :data:`DIALECTS` says, for each vocabulary (the
OpenTelemetry GenAI semantic conventions, OpenLLMetry, OpenInference, Langfuse), which
values of which attribute key put a span in which stage. Each (stage, key) pair compiles
to one single-attribute :class:`MatchRule`, so the classifier answers with one dictionary
probe per key. Values listed as ``not_stages`` are known and deliberately left out
(agents, workflows, chains): their spans contain the calls, they are not calls.
:data:`NOT_CALLS` lists values that make a span no call whatever else it carries (a
Logfire log record that repeats its call's operation name). Recognising the next
instrumentation is a new row, not new code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from latency_budget._config.matching import MatchRule, exact_values
from latency_budget._config.model import FirstTokenSource

__all__ = [
    "BUILTIN_STAGES",
    "DEFAULT_FIRST_TOKEN",
    "DEFAULT_PARALLELIZABLE",
    "DIALECTS",
    "NOT_CALLS",
    "Dialect",
    "NotACall",
    "builtin_rules",
]

BUILTIN_STAGES: tuple[str, ...] = ("retrieval", "model_call", "tool_calls")


@dataclass(frozen=True, slots=True)
class Dialect:
    """One attribute key of one vocabulary: which of its values mean which built-in stage."""

    source: str  # who writes the key (for the docs and error messages)
    key: str
    stages: Mapping[str, tuple[str, ...]]
    not_stages: tuple[str, ...] = ()  # values known to mean "not a call": agents, workflows...
    values: Mapping[str, str] = field(init=False, repr=False, compare=False)  # value -> stage

    def __post_init__(self) -> None:
        values: dict[str, str] = {}
        for stage, listed in self.stages.items():
            if stage not in BUILTIN_STAGES:
                raise ValueError(f"{self.source}: {stage!r} is not a built-in stage")
            for value in listed:
                if values.setdefault(value, stage) != stage or value in self.not_stages:
                    raise ValueError(f"{self.source}: {self.key}={value!r} is listed twice")
        object.__setattr__(self, "stages", MappingProxyType(dict(self.stages)))
        object.__setattr__(self, "values", MappingProxyType(values))


DIALECTS: tuple[Dialect, ...] = (
    Dialect(
        "OpenTelemetry GenAI semantic conventions",
        "gen_ai.operation.name",
        {
            "retrieval": ("retrieval", "embeddings"),
            "model_call": ("chat", "text_completion", "generate_content"),
            "tool_calls": ("execute_tool",),
        },
        not_stages=("invoke_agent", "create_agent", "invoke_workflow"),
    ),
    Dialect(
        # opentelemetry-semantic-conventions-ai's GenAICustomOperationName, and the LlamaIndex
        # instrumentation's reranker spans.
        "OpenLLMetry (Traceloop)",
        "gen_ai.operation.name",
        {"retrieval": ("vector_db_retrieve", "rerank"), "model_call": ("llm_request",)},
        not_stages=("execute_task",),
    ),
    Dialect(
        # LLMRequestTypeValues: what OpenLLMetry wrote before gen_ai.operation.name, still defined.
        "OpenLLMetry (Traceloop), older releases",
        "llm.request.type",
        {"retrieval": ("embedding", "rerank"), "model_call": ("chat", "completion")},
        not_stages=("unknown",),
    ),
    Dialect(
        # TraceloopSpanKindValues: traceloop-sdk's @tool/@task/@agent/@workflow decorators.
        "OpenLLMetry (Traceloop)",
        "traceloop.span.kind",
        {"tool_calls": ("tool",)},
        not_stages=("workflow", "task", "agent", "unknown"),
    ),
    Dialect(
        "OpenInference",
        "openinference.span.kind",
        {"retrieval": ("RETRIEVER", "EMBEDDING", "RERANKER"), "model_call": ("LLM",), "tool_calls": ("TOOL",)},
        not_stages=("AGENT", "CHAIN", "GUARDRAIL", "EVALUATOR", "PROMPT", "UNKNOWN"),
    ),
    Dialect(
        # langfuse._client.constants: the observation types of the Langfuse SDK (v3 and later).
        "Langfuse SDK",
        "langfuse.observation.type",
        {"retrieval": ("retriever", "embedding"), "model_call": ("generation",), "tool_calls": ("tool",)},
        not_stages=("span", "agent", "chain", "evaluator", "guardrail", "event"),
    ),
)


@dataclass(frozen=True, slots=True)
class NotACall:
    """Values of one key that make a span no call, whatever its other attributes say."""

    source: str
    key: str
    values: tuple[str, ...]
    why: str  # for the dialect table (docs)


NOT_CALLS: tuple[NotACall, ...] = (
    NotACall(
        "Logfire",
        "logfire.span_type",
        ("log",),
        "a log record written as a zero-length span (instrument_openai's `streaming response from ...` "
        "beside a streamed call carries the call's gen_ai.operation.name)",
    ),
)


def _compile(dialects: tuple[Dialect, ...], not_calls: tuple[NotACall, ...]) -> dict[str, tuple[MatchRule, ...]]:
    """One single-attribute rule per (stage, key), values merged across dialects sharing a key.

    Every rule carries the same vetoes, from ``not_calls``.
    """
    by_stage: dict[str, dict[str, list[str]]] = {stage: {} for stage in BUILTIN_STAGES}
    owner: dict[tuple[str, str], str] = {}
    for dialect in dialects:
        for value, stage in dialect.values.items():
            other = owner.setdefault((dialect.key, value), stage)
            if other != stage:
                raise ValueError(f"{dialect.key}={value!r} is both {other} and {stage}")
            by_stage[stage].setdefault(dialect.key, []).append(value)
    unless = tuple((entry.key, exact_values(entry.values)) for entry in not_calls)
    return {
        stage: tuple(
            MatchRule(attributes=((key, exact_values(values)),), unless=unless) for key, values in keys.items()
        )
        for stage, keys in by_stage.items()
    }


_BUILTIN = _compile(DIALECTS, NOT_CALLS)

# Stages whose independent calls could usually run concurrently.
DEFAULT_PARALLELIZABLE: frozenset[str] = frozenset({"retrieval", "tool_calls"})

# Where instrumentations record time to first token, in the order they are tried.
DEFAULT_FIRST_TOKEN: tuple[FirstTokenSource, ...] = (
    # pydantic-ai and Logfire: seconds from the request's start, on streamed chat spans.
    FirstTokenSource(attribute="gen_ai.client.operation.time_to_first_chunk", unit="s"),
    # The semantic conventions' span attribute, deprecated (moved out of the core registry).
    FirstTokenSource(attribute="gen_ai.response.time_to_first_chunk", unit="s"),
    # Langfuse: the instant of the first token, a JSON-quoted ISO-8601 string.
    FirstTokenSource(attribute="langfuse.observation.completion_start_time", unit="iso8601"),
    FirstTokenSource(event="gen_ai.first_token"),
    # OpenInference (OpenAI, LlamaIndex): an event when the first chunk arrives.
    FirstTokenSource(event="First Token Stream Event"),
    # OpenLLMetry (OpenAI): one event per streamed chunk; the first one is the first token.
    FirstTokenSource(event="gen_ai.content.completion.chunk"),
)


def builtin_rules(stage: str) -> tuple[MatchRule, ...] | None:
    """The built-in rules for a stage name, or ``None`` when it has none."""
    return _BUILTIN.get(stage)
