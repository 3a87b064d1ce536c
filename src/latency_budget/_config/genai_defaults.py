"""Built-in matchers for the OpenTelemetry GenAI semantic conventions.

A stage named ``retrieval``, ``model_call`` or ``tool_calls`` that has no ``match`` key
uses these rules. They recognise the semconv ``gen_ai.operation.name`` values and, for
users of OpenInference instrumentations, its ``openinference.span.kind`` values.
"""

from __future__ import annotations

from latency_budget._config.matching import MatchRule, exact_values
from latency_budget._config.model import FirstTokenSource

__all__ = ["BUILTIN_STAGES", "DEFAULT_FIRST_TOKEN", "DEFAULT_PARALLELIZABLE", "builtin_rules"]

_OPERATION = "gen_ai.operation.name"
_OPENINFERENCE_KIND = "openinference.span.kind"


def _rules(operations: tuple[str, ...], openinference: tuple[str, ...]) -> tuple[MatchRule, ...]:
    return (
        MatchRule(attributes=((_OPERATION, exact_values(operations)),)),
        MatchRule(attributes=((_OPENINFERENCE_KIND, exact_values(openinference)),)),
    )


_BUILTIN: dict[str, tuple[MatchRule, ...]] = {
    "retrieval": _rules(("retrieval", "embeddings"), ("RETRIEVER", "EMBEDDING")),
    "model_call": _rules(("chat", "text_completion", "generate_content"), ("LLM",)),
    "tool_calls": _rules(("execute_tool",), ("TOOL",)),
}

BUILTIN_STAGES: tuple[str, ...] = tuple(_BUILTIN)

# Stages whose independent calls could usually run concurrently.
DEFAULT_PARALLELIZABLE: frozenset[str] = frozenset({"retrieval", "tool_calls"})

# Where instrumentations record time to first token, in the order they are tried.
DEFAULT_FIRST_TOKEN: tuple[FirstTokenSource, ...] = (
    FirstTokenSource(attribute="gen_ai.response.time_to_first_chunk", unit="s"),
    FirstTokenSource(attribute="langfuse.observation.completion_start_time", unit="iso8601"),
    FirstTokenSource(event="gen_ai.first_token"),
    FirstTokenSource(event="First Token Stream Event"),
    FirstTokenSource(event="gen_ai.content.completion.chunk"),
)


def builtin_rules(stage: str) -> tuple[MatchRule, ...] | None:
    """The built-in rules for a stage name, or ``None`` when it has none."""
    return _BUILTIN.get(stage)
