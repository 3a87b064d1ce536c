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
from operator import attrgetter

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
_ARGUMENT_KEYS = frozenset(_ARGUMENTS)
_LEVER_KEYS = frozenset((*_MODELS, *_ARGUMENTS))  # a span with none of these can have no lever
_MODEL = _MODELS[0]
# The spellings of the counts and the provider other than the semantic conventions'.
_OTHER_NAMES = frozenset((*_INPUT_TOKENS[1:], *_OUTPUT_TOKENS[1:], *_PROVIDERS[1:]))
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
    """The calls a lever can use, in start order (then end, then span id).

    Those are the stage spans with a model or arguments, and the other spans of their
    stages (whose time the stage's union needs). A stage none of whose spans has either,
    such as most tool and guardrail stages, gives none: reading its spans would cost the
    root's end for nothing.
    """
    calls: list[Call] = []
    others: list[RawCall] = []
    used: set[int] = set()
    for item in raw:
        attributes = item[5]
        # A model name (the common case, one lookup) or any of the keys a lever reads.
        if _MODEL in attributes or not _LEVER_KEYS.isdisjoint(attributes):
            span_id, stage, start, end, ttft, _ = item
            calls.append(call_of(span_id, stages[stage].name, start, end, ttft, attributes))
            used.add(stage)
        else:
            others.append(item)
    if not calls:
        return ()
    for span_id, stage, start, end, ttft, _ in others:
        if stage in used:
            name = stages[stage].name
            streamed = ttft is not None
            calls.append(
                Call(span_id, name, start, end, ttft, None, None, None, False, streamed, False, None, None, None, None)
            )
    if len(calls) > 1:
        calls.sort(key=_ORDER)
    return tuple(calls)


_ORDER = attrgetter("start_ns", "end_ns", "span_id")


def call_of(
    span_id: int, stage: str, start_ns: int, end_ns: int, first_token_ns: int | None, attributes: Mapping[str, object]
) -> Call:
    """Read one stage span's attributes; values of the wrong type count as absent.

    This runs for every stage span when its root ends: the semantic-convention names are
    read first, the other spellings only when those are missing.
    """
    get: Callable[[str], object] = attributes.get
    model = get(_MODEL)
    if type(model) is not str or not model:
        model = _first_str(get, _MODELS[1:])
    # Older and OpenInference spellings of the counts and the provider are looked for only
    # when a semantic-convention name is missing and the span has any of them (one set
    # operation; most spans have none).
    other = None
    operation = get(_OPERATION)
    # A list (replayed JSON) is unhashable: only a string can name a generation operation.
    generation = (type(operation) is str and operation in GENERATION_OPERATIONS) or (
        operation is None and get(_OPENINFERENCE_KIND) == "LLM"
    )
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    provider: str | None = None
    to_tools = False
    if model is not None:
        target: str | None = model
        found = get(_INPUT_TOKENS[0])
        if type(found) is int and found >= 0:
            input_tokens = found
        elif other or (other is None and (other := not _OTHER_NAMES.isdisjoint(attributes))):
            input_tokens = _first_count(get, _INPUT_TOKENS[1:])
        found = get(_OUTPUT_TOKENS[0])
        if type(found) is int and found >= 0:
            output_tokens = found
        elif other or (other is None and (other := not _OTHER_NAMES.isdisjoint(attributes))):
            output_tokens = _first_count(get, _OUTPUT_TOKENS[1:])
        found = get(_RESPONSE_MODEL)
        response_model = found if type(found) is str else None
        found = get(_PROVIDERS[0])
        if type(found) is str and found:
            provider = found
        elif other or (other is None and (other := not _OTHER_NAMES.isdisjoint(attributes))):
            provider = _first_str(get, _PROVIDERS[1:])
        reasons = get(_FINISH_REASONS)
        to_tools = reasons is not None and _answered_with_tools(reasons)
    else:
        target = _first_str(get, _TOOL_NAMES)
        if target is None:
            found = get(_DATA_SOURCE)
            target = found if type(found) is str else None
    key = None
    if not _ARGUMENT_KEYS.isdisjoint(attributes):
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
        first_token_ns is not None or get(_STREAM) is True,
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
