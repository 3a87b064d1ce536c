"""What the latency levers know about each stage span of a request: a :class:`Call`.

The processor keeps, for each recorded stage span, its stage, times, time to first
token and its (frozen) attribute mapping; only when the root ends are the few attributes
the levers read turned into a :class:`Call`. They are read, never written: model names,
tool names and arguments stay inside the process (arguments only as a hash, the call's
identity for the cache lever), so nothing of them reaches an attribute or metric value.

Attribute names are those of the OpenTelemetry GenAI semantic conventions, with the
older and OpenInference spellings as fall-backs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from latency_budget._config.model import StageBudget

__all__ = ["GENERATION_OPERATIONS", "Call", "RawCall", "call_of", "calls_of"]

# (span id, stage index, start ns, end ns, time to first token ns or None, the span's attributes)
RawCall = tuple[int, int, int, int, "int | None", Mapping[str, object]]

GENERATION_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

_OPERATION = "gen_ai.operation.name"
_OPENINFERENCE_KIND = "openinference.span.kind"
_MODELS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
_RESPONSE_MODEL = "gen_ai.response.model"
_PROVIDERS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider")
_STREAM = "gen_ai.request.stream"
_INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
_FINISH_REASONS = "gen_ai.response.finish_reasons"
_TOOL_NAMES = ("gen_ai.tool.name", "tool.name")
_DATA_SOURCE = "gen_ai.data_source.id"
# What makes two calls identical, besides their stage and target: the first of these present.
_ARGUMENTS = (
    "gen_ai.tool.call.arguments",
    "gen_ai.retrieval.query.text",
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "input.value",
)
_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
_TO_TOOLS = frozenset({"tool_calls", "function_call", "tool_use"})


@dataclass(slots=True)
class Call:
    """One stage span of a request, as the levers see it (treat as read-only).

    ``generation`` is a chat or completion call (its output can be streamed);
    ``streamed`` says it streamed (``gen_ai.request.stream`` true, or a first token
    recorded); ``to_tools`` that it answered with tool calls, so its output was not for
    the user. ``key`` identifies identical calls (same stage, target and arguments) and
    is ``None`` when the span carries no arguments. ``target`` is what was called: a
    model, a tool or a data source, for people only.
    """

    span_id: int
    stage: str
    start_ns: int
    end_ns: int
    first_token_ns: int | None
    model: str | None
    response_model: str | None
    provider: str | None
    generation: bool
    streamed: bool
    to_tools: bool
    input_tokens: int | None
    output_tokens: int | None
    key: int | None
    target: str | None

    @property
    def duration_ns(self) -> int:
        """The span's length (0 when it ends before it starts)."""
        return self.end_ns - self.start_ns if self.end_ns > self.start_ns else 0


def calls_of(raw: Sequence[RawCall], stages: Sequence[StageBudget]) -> tuple[Call, ...]:
    """The :class:`Call` of each recorded stage span, in start order (then end, then span id)."""
    calls = [
        call_of(span_id, stages[stage].name, start, end, ttft, attrs) for span_id, stage, start, end, ttft, attrs in raw
    ]
    calls.sort(key=lambda c: (c.start_ns, c.end_ns, c.span_id))
    return tuple(calls)


def call_of(
    span_id: int, stage: str, start_ns: int, end_ns: int, first_token_ns: int | None, attributes: Mapping[str, object]
) -> Call:
    """Read one stage span's attributes; values of the wrong type count as absent."""
    get: Callable[[str], object] = attributes.get
    model = _first_str(get, _MODELS)
    operation = get(_OPERATION)
    generation = operation in GENERATION_OPERATIONS or get(_OPENINFERENCE_KIND) == "LLM"
    tool = _first_str(get, _TOOL_NAMES)
    target = model if model is not None else tool
    if target is None:
        source = get(_DATA_SOURCE)
        target = source if type(source) is str else None
    stream = get(_STREAM)
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    provider: str | None = None
    to_tools = False
    if model is not None:
        input_tokens = _first_count(get, _INPUT_TOKENS)
        output_tokens = _first_count(get, _OUTPUT_TOKENS)
        found = get(_RESPONSE_MODEL)
        response_model = found if type(found) is str else None
        provider = _first_str(get, _PROVIDERS)
        to_tools = _answered_with_tools(get(_FINISH_REASONS))
    key = None
    for name in _ARGUMENTS:
        arguments = get(name)
        if arguments is not None:
            key = _identity(stage, operation, target, arguments, get(_SYSTEM_INSTRUCTIONS))
            break
    return Call(
        span_id,
        stage,
        start_ns,
        end_ns,
        first_token_ns,
        model,
        response_model,
        provider,
        generation,
        stream is True or first_token_ns is not None,
        to_tools,
        input_tokens,
        output_tokens,
        key,
        target,
    )


def _first_str(get: Callable[[str], object], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = get(name)
        if type(value) is str and value:
            return value
    return None


def _first_count(get: Callable[[str], object], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = get(name)
        if type(value) is int and value >= 0:
            return value
    return None


def _answered_with_tools(reasons: object) -> bool:
    """Whether finish reasons (a sequence, or a JSON array in a string as Jaeger keeps it) name tool calls."""
    if reasons is None:
        return False
    if isinstance(reasons, str):
        return any(reason in reasons for reason in _TO_TOOLS)
    if isinstance(reasons, (tuple, list)):
        return any(reason in _TO_TOOLS for reason in reasons)
    return False


def _identity(stage: str, operation: object, target: str | None, arguments: object, instructions: object) -> int | None:
    """A hash of what makes a call identical; ``None`` when the values cannot be hashed."""
    if isinstance(arguments, list):
        arguments = tuple(arguments)
    if isinstance(instructions, list):
        instructions = tuple(instructions)
    try:
        return hash((stage, operation, target, arguments, instructions))
    except TypeError:
        return None
