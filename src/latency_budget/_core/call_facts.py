"""What the latency levers know about each stage span of a request: a :class:`Call`.

The processor keeps, for each recorded stage span, its stage, times, time to first
token and its (frozen) attribute mapping; only when the root ends are the few attributes
the levers read turned into what they need. They are read, never written: model names,
tool names and arguments stay inside the process (arguments only as a hash, the call's
identity for the cache lever), so nothing of them reaches an attribute or metric value.

Two shapes, read by one rule (:func:`recorded_calls`): a :class:`Sample` is what the recent-call
series keep and the processor's quick test reads, made at every root's end; a
:class:`Call` adds the response model, the provider and the span id, for people and for
the estimates, and is made only when something asks for it (:class:`RecordedCalls`).

Attribute names come from the dialect table (``CallKeys`` in
``_config/genai_defaults.py``): the OpenTelemetry GenAI semantic conventions first, the
older and OpenInference spellings as fall-backs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import overload

from latency_budget._config.genai_defaults import (
    CALL_KEYS,
    DIALECTS,
    GENERATION_VALUES,
    TOOL_CALL_FINISH_REASONS,
    TOOL_CALLS_ONLY,
)
from latency_budget._core.first_token import answered_with_tool_calls_only
from latency_budget._core.quality import CallQuality

__all__ = [
    "GENERATION_OPERATIONS",
    "SAMPLE_FIELDS",
    "Call",
    "RawCall",
    "RecordedCalls",
    "Sample",
    "call_of",
    "calls_of",
    "recorded_calls",
    "sample_of",
]

# (span id, stage name, start ns, end ns, time to first token ns or None, the span's attributes)
RawCall = tuple[int, str, int, int, "int | None", Mapping[str, object]]

# The generation operations of the first dialect key (the semantic conventions'), read
# first; the other dialects' only when a span lacks that key.
_GENERATION_KEY, GENERATION_OPERATIONS = GENERATION_VALUES[0]
_OTHER_GENERATIONS = GENERATION_VALUES[1:]

_OPERATION = DIALECTS[0].key  # part of a call's identity
_MODELS = CALL_KEYS.model
_MODEL = _MODELS[0]
_INPUT_TOKENS = CALL_KEYS.input_tokens
_OUTPUT_TOKENS = CALL_KEYS.output_tokens
_INPUT, _OUTPUT = _INPUT_TOKENS[0], _OUTPUT_TOKENS[0]
_PROVIDERS = CALL_KEYS.provider
_ARGUMENTS = CALL_KEYS.arguments  # what makes two calls identical, besides stage and target: the first present
_ARGUMENT_KEYS = frozenset(_ARGUMENTS)
_RESULTS = CALL_KEYS.results  # read only on a span with arguments
# The first spelling of these is read inline, the others (if any) only when it is missing.
_FINISH_REASONS, _OTHER_FINISH_REASONS = CALL_KEYS.finish_reasons[0], CALL_KEYS.finish_reasons[1:]
_STREAM, _OTHER_STREAM = CALL_KEYS.stream[0], CALL_KEYS.stream[1:]
# Reasoning tokens: one presence test of every spelling, not a read of the first (most
# calls record none, and a span's mapping answers a set's test for less than one get).
_REASONING = CALL_KEYS.reasoning_tokens
_no_reasoning_keys = frozenset(_REASONING).isdisjoint
# Read only where a Call is made (the levers' reading of a request, not the series): the
# input tokens the provider's prompt cache served or took, and the reasoning level asked for.
_CACHE_KEYS = frozenset((*CALL_KEYS.cached_input_tokens, *CALL_KEYS.cache_creation_input_tokens))
_no_cache_keys = _CACHE_KEYS.isdisjoint
_LEVER_KEYS = frozenset((*_MODELS, *_ARGUMENTS))  # a span with none of these can have no lever
# The presence tests, bound once: a method looked up at each call costs more (callgrind).
_no_lever_keys = _LEVER_KEYS.isdisjoint
_no_arguments = _ARGUMENT_KEYS.isdisjoint
# The spellings of the counts and the provider after the semantic conventions' first ones.
_OTHER_NAMES = frozenset((*_INPUT_TOKENS[1:], *_OUTPUT_TOKENS[1:], *_PROVIDERS[1:]))
_TO_TOOLS = TOOL_CALL_FINISH_REASONS  # the one list, shared with the first-token rule (first_token.py)
# The attributes of the first-token rule's other ways to say "tool calls only" (indexed
# finish reasons, output messages, OpenInference's tool calls): read, through that rule,
# only on a generation call without a first token or the finish reasons read inline.
_TOOL_ROW_KEYS = frozenset(
    key
    for row in TOOL_CALLS_ONLY
    if row.event is None
    for key in (row.finish_key, row.messages_key, row.tool_call_key)
    if key is not None and key not in CALL_KEYS.finish_reasons
)
_no_tool_rows = _TOOL_ROW_KEYS.isdisjoint
_NO_TOOLS_ONLY: frozenset[int] = frozenset()
_object_new = object.__new__


# What the recent-call series keep of one call, and the processor's quick test reads: a
# plain tuple, laid out as SAMPLE_FIELDS, whose fields mean what Call's of the same name
# mean. Not a NamedTuple: made at every root's end for every stage span with a model or
# arguments, and under callgrind a NamedTuple cost about 1,500 instructions more each
# (through tuple.__new__; its own __new__, a Python-level call, about 3,300 more).
Sample = tuple[
    str,
    "str | None",
    int,
    int,
    "int | None",
    "int | None",
    "int | None",
    bool,
    bool,
    bool,
    "int | None",
    "str | None",
    "int | None",
    "int | None",
]
SAMPLE_FIELDS = (
    "stage",
    "model",
    "start_ns",
    "end_ns",
    "first_token_ns",
    "input_tokens",
    "output_tokens",
    "generation",
    "streamed",
    "to_tools",
    "key",
    "target",
    "result",
    "reasoning_tokens",
)


@dataclass(slots=True)
class Call:
    """One stage span of a request, as the levers see it (treat as read-only).

    ``generation`` is a chat or completion call (its output can be streamed);
    ``streamed`` says it streamed (``gen_ai.request.stream`` true, or a first token
    recorded); ``to_tools`` that it answered with tool calls, so its output was not for
    the user. Only a generation's levers (streaming, output length, reasoning) read its
    output and reasoning tokens, stream flag and finish reasons, so only a generation
    call's are read: on another call they are ``None`` and ``False`` (a first token
    recorded still makes it ``streamed``). ``key`` identifies identical calls (same stage, target and arguments) and
    is ``None`` when the span carries no arguments. ``target`` is what was called: a
    model, a tool or a data source, for people only. ``result`` is a hash of what a call
    with arguments returned (``gen_ai.tool.call.result``, OpenInference's
    ``output.value``...: the ``results`` column of the dialects), ``None`` when not recorded.
    ``reasoning_tokens`` are the output tokens spent reasoning, ``reasoning_level`` the level
    (effort) the call asked for; ``cached_input_tokens`` the input tokens the provider read
    from its prompt cache and ``cache_creation_input_tokens`` those it wrote to it, each
    within ``input_tokens`` (``None`` when not recorded, or when more than the input tokens).
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
    result: int | None = None
    quality: CallQuality | None = None  # filled by the quality reader (issue 46) where evidence exists
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_level: str | None = None

    @property
    def duration_ns(self) -> int:
        """The span's length (0 when it ends before it starts)."""
        return self.end_ns - self.start_ns if self.end_ns > self.start_ns else 0


class RecordedCalls(Sequence[Call]):
    """A request's calls (as :func:`calls_of` gives them), read from its spans only when first asked for.

    Made with the :attr:`samples` of its spans that have a model or arguments (what the
    recent-call series keep, and all most roots' ends need); the calls themselves are
    read when first iterated. Equal to any sequence of the same calls.
    """

    __slots__ = ("_built", "_raw", "_tools_only", "samples")

    samples: list[Sample]
    """The samples of the calls that have a model or arguments, in the order of :func:`calls_of`."""

    def __init__(self, raw: Sequence[RawCall], tools_only: AbstractSet[int] = _NO_TOOLS_ONLY) -> None:
        found = recorded_calls(raw, tools_only)
        self._raw = raw
        self._tools_only = tools_only
        self._built: tuple[Call, ...] | None = None
        self.samples = found.samples if found else []

    def calls(self) -> tuple[Call, ...]:
        built = self._built
        if built is None:
            built = self._built = calls_of(self._raw, self._tools_only, self.samples)
        return built

    def __bool__(self) -> bool:
        return bool(self.samples)  # calls_of gives calls exactly when a span has a model or arguments

    def __len__(self) -> int:
        return len(self.calls())

    @overload
    def __getitem__(self, index: int) -> Call: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Call, ...]: ...
    def __getitem__(self, index: int | slice) -> Call | tuple[Call, ...]:
        return self.calls()[index]

    def __iter__(self) -> Iterator[Call]:
        return iter(self.calls())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self.calls() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a list: equal to sequences of any kind

    def __repr__(self) -> str:
        return repr(self.calls())


def recorded_calls(raw: Sequence[RawCall], tools_only: AbstractSet[int] = _NO_TOOLS_ONLY) -> RecordedCalls | tuple[()]:
    """The :class:`RecordedCalls` of ``raw``, or ``()`` when no span has a model or arguments (no call, no lever).

    ``tools_only`` holds the span ids of the calls that answered with tool calls only as
    the first-token rule found when it recorded them (``TraceState.tools_only``): every
    call with a first token, and those whose scope says it in an event, read with every
    spelling then, and not twice. Another call is read here: its finish reasons, else the
    rule's other attribute spellings (only on a span that carries one of them).

    What the root's end uses, and the one reading of a span's lever facts: values of the
    wrong type count as absent. It runs for every stage span with a model or arguments
    when its root ends, so it is one loop with the reading inline, and it makes the
    object without its ``__init__``: under callgrind, each Python-level call here cost
    about 1,000-1,500 instructions, more than the reading of a span's first spellings.
    The semantic-convention names are read first, the other spellings only when those
    are missing and the span has any of them (one set operation; most spans have none).
    Samples are in start order (then end, then span id).
    """
    samples: list[Sample] = []
    last = None
    ordered = True
    for span_id, stage, start_ns, end_ns, first_token_ns, attributes in raw:
        get: Callable[[str], object] = attributes.get
        model = get(_MODEL)
        if type(model) is not str or not model:
            if _no_lever_keys(attributes):
                continue  # no model and no arguments: no lever reads this span
            model = _first_str(get, _MODELS[1:])
        if last is not None and start_ns <= last:
            ordered = False
        last = start_ns
        # The first generation key the span carries decides. A list (replayed JSON) is
        # unhashable: only a string can name a generation operation.
        operation = get(_GENERATION_KEY)
        if operation is not None:
            generation = type(operation) is str and operation in GENERATION_OPERATIONS
        else:
            generation = _other_generation(get)
        output_tokens: int | None = None
        reasoning_tokens: int | None = None
        to_tools = False
        streamed = first_token_ns is not None
        target: str | None = model
        if model is not None:
            found = get(_INPUT)
            input_tokens = found if type(found) is int and found >= 0 else None
            if generation:
                # What only a generation's levers read (streaming, output length): its
                # output, whether it streamed and whether it answered with tool calls.
                found = get(_OUTPUT)
                if type(found) is int and found >= 0:
                    output_tokens = found
                reasons = get(_FINISH_REASONS)
                if reasons is None and _OTHER_FINISH_REASONS:
                    reasons = _first(get, _OTHER_FINISH_REASONS)
                if reasons is not None:
                    to_tools = _answered_with_tools(reasons)
                elif tools_only and span_id in tools_only:  # decided when recorded, every spelling read
                    to_tools = True
                elif first_token_ns is None and not _no_tool_rows(attributes):  # the rule's other spellings
                    to_tools = answered_with_tool_calls_only(attributes)
                if not streamed:
                    streamed = get(_STREAM) is True or (bool(_OTHER_STREAM) and _any_true(get, _OTHER_STREAM))
            # A span that spells either count the conventions' way spells both so (an
            # embedding has no output): the other spellings are read only on a span with
            # neither, and only if it carries any of them (one set operation).
            if input_tokens is None and output_tokens is None and not _OTHER_NAMES.isdisjoint(attributes):
                input_tokens = _first_count(get, _INPUT_TOKENS[1:])
                if generation:
                    output_tokens = _first_count(get, _OUTPUT_TOKENS[1:])
            # Reasoning tokens are counted within the output tokens: read where those are.
            if output_tokens is not None and not _no_reasoning_keys(attributes):
                reasoning_tokens = _first_count(get, _REASONING)
        else:
            input_tokens = None
            target = _first_str(get, CALL_KEYS.tool_name)
            if target is None:
                target = _first_text(get, CALL_KEYS.data_source)
        key = result = None
        if not _no_arguments(attributes):
            arguments = _first(get, _ARGUMENTS)
            if arguments is not None:
                key = _identity(stage, get(_OPERATION), target, arguments, _first(get, CALL_KEYS.instructions))
                returned = _first(get, _RESULTS)
                if returned is not None:
                    result = _hashed(returned)
        samples.append(
            (
                stage,
                model,
                start_ns,
                end_ns,
                first_token_ns,
                input_tokens,
                output_tokens,
                generation,
                streamed,
                to_tools,
                key,
                target,
                result,
                reasoning_tokens,
            )
        )
    if not samples:
        return ()
    if not ordered:  # rare: spans end in their own order, but one after another start in it too
        samples = _in_start_order(raw, samples)
    calls: RecordedCalls = _object_new(RecordedCalls)
    calls._raw = raw
    calls._tools_only = tools_only
    calls._built = None
    calls.samples = samples
    return calls


def _other_generation(get: Callable[[str], object]) -> bool:
    """Whether the other dialects' first generation key the span carries names a generation operation."""
    for name, values in _OTHER_GENERATIONS:
        operation = get(name)
        if operation is not None:
            return type(operation) is str and operation in values
    return False


def _any_true(get: Callable[[str], object], names: tuple[str, ...]) -> bool:
    return any(get(name) is True for name in names)


def _in_start_order(raw: Sequence[RawCall], samples: list[Sample]) -> list[Sample]:
    """``samples`` (of the spans of ``raw`` a lever reads, in that order) by start, then end, then span id."""
    chosen = [item for item in raw if _has_lever_keys(item[5])]
    order = sorted(range(len(chosen)), key=lambda i: _RAW_ORDER(chosen[i]))
    return [samples[i] for i in order]


def _has_lever_keys(attributes: Mapping[str, object]) -> bool:
    """Whether a lever reads this span (recorded_calls' test): a model name (a non-empty string) or any lever key."""
    model = attributes.get(_MODEL)
    return (type(model) is str and model != "") or not _no_lever_keys(attributes)


def calls_of(
    raw: Sequence[RawCall], tools_only: AbstractSet[int] = _NO_TOOLS_ONLY, samples: Sequence[Sample] | None = None
) -> tuple[Call, ...]:
    """The calls a lever can use, in start order (then end, then span id); ``tools_only`` as for recorded_calls.

    Those are the stage spans with a model or arguments, and the other spans of their
    stages (whose time the stage's union needs). A stage none of whose spans has either,
    such as most tool and guardrail stages, gives none: reading its spans would cost the
    root's end for nothing. ``samples``, when given, are :func:`recorded_calls`' of ``raw``
    (with the same ``tools_only``): the facts they hold are not read again.
    """
    calls: list[Call] = []
    others: list[RawCall] = []
    keyed: list[RawCall] = []
    for item in raw:
        if _has_lever_keys(item[5]):  # the same spans as recorded_calls reads
            keyed.append(item)
        else:
            others.append(item)
    if not keyed:
        return ()
    if samples is not None and len(samples) == len(keyed):
        # recorded_calls gives the samples of these spans in this order (start, end, span id).
        for item, sample in zip(sorted(keyed, key=_RAW_ORDER), samples, strict=True):
            calls.append(_call_of_sample(item[0], sample, item[5]))
    else:
        for span_id, stage, start, end, ttft, attributes in keyed:
            calls.append(call_of(span_id, stage, start, end, ttft, attributes, tools_only))
    used = {item[1] for item in keyed}
    for span_id, stage, start, end, ttft, _ in others:
        if stage in used:
            calls.append(_untyped_call(span_id, stage, start, end, ttft))
    if len(calls) > 1:
        calls.sort(key=_ORDER)
    return tuple(calls)


_ORDER = attrgetter("start_ns", "end_ns", "span_id")
_RAW_ORDER = itemgetter(2, 3, 0)  # the same order on a RawCall


def call_of(
    span_id: int,
    stage: str,
    start_ns: int,
    end_ns: int,
    first_token_ns: int | None,
    attributes: Mapping[str, object],
    tools_only: AbstractSet[int] = _NO_TOOLS_ONLY,
) -> Call:
    """Read one stage span's attributes; values of the wrong type count as absent.

    A span with no model name and no arguments is read as :func:`calls_of` gives the
    other spans of a stage: times only. ``tools_only`` as for :func:`recorded_calls`.
    """
    found = recorded_calls([(span_id, stage, start_ns, end_ns, first_token_ns, attributes)], tools_only)
    if not found:
        return _untyped_call(span_id, stage, start_ns, end_ns, first_token_ns)
    return _call_of_sample(span_id, found.samples[0], attributes)


def _call_of_sample(span_id: int, sample: Sample, attributes: Mapping[str, object]) -> Call:
    """The :class:`Call` of a span whose :data:`Sample` is read: the facts a sample does not keep read here."""
    (
        stage,
        model,
        start_ns,
        end_ns,
        first_token_ns,
        input_tokens,
        output_tokens,
        generation,
        streamed,
        to_tools,
        key,
        target,
        result,
        reasoning,
    ) = sample
    get: Callable[[str], object] = attributes.get
    response_model: str | None = None
    provider: str | None = None
    cached: int | None = None
    written: int | None = None
    level: str | None = None
    if model is not None:
        response_model = _first_text(get, CALL_KEYS.response_model)
        provider = _first_str(get, _PROVIDERS)
        # A prompt cache serves a generation's prompt (an embedding has none).
        if generation and input_tokens is not None and not _no_cache_keys(attributes):
            cached = _first_count(get, CALL_KEYS.cached_input_tokens)
            written = _first_count(get, CALL_KEYS.cache_creation_input_tokens)
            # Each is a share of the input tokens: a count beyond them is of another kind
            # (an API whose input count leaves the cache out), not read as a share.
            if cached is not None and cached > input_tokens:
                cached = None
            if written is not None and written + (cached or 0) > input_tokens:
                written = None
        if reasoning is not None:  # a call that records no reasoning has no level to compare
            level = _first_text(get, CALL_KEYS.reasoning_level)
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
        streamed,
        to_tools,
        input_tokens,
        output_tokens,
        key,
        target,
        result,
        None,
        reasoning,
        cached,
        written,
        level,
    )


def sample_of(call: Call) -> Sample:
    """The sample of ``call``: what the series keep of it (its fields named by SAMPLE_FIELDS)."""
    return _SAMPLE_OF(call)


_SAMPLE_OF = attrgetter(*SAMPLE_FIELDS)


def _untyped_call(span_id: int, stage: str, start_ns: int, end_ns: int, first_token_ns: int | None) -> Call:
    """A stage span that no lever reads (no model, no arguments): its times only."""
    streamed = first_token_ns is not None
    return Call(
        span_id,
        stage,
        start_ns,
        end_ns,
        first_token_ns,
        None,
        None,
        None,
        False,
        streamed,
        False,
        None,
        None,
        None,
        None,
    )


def _first(get: Callable[[str], object], names: tuple[str, ...]) -> object:
    for name in names:
        value = get(name)
        if value is not None:
            return value
    return None


def _first_str(get: Callable[[str], object], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = get(name)
        if type(value) is str and value:
            return value
    return None


def _first_text(get: Callable[[str], object], names: tuple[str, ...]) -> str | None:
    """The first string among ``names``, an empty one included."""
    for name in names:
        value = get(name)
        if type(value) is str:
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


def _hashed(value: object) -> int | None:
    """A hash of a recorded result (a list, as replayed JSON gives, as a tuple); ``None`` when it cannot be hashed."""
    if isinstance(value, list):
        value = tuple(value)
    try:
        return hash(value)
    except TypeError:
        return None


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
