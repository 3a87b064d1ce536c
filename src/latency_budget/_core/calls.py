"""What one call of a stage is, and which calls are of one kind.

**One call is one call.** A stage span nested, at any depth, inside another span of the
same stage is part of that call: a framework's span around its own inner steps
(LlamaIndex's ``predict`` around ``complete``), or two instrumentations of one client
library (``generation`` around ``openai.chat``). Only the outermost span of each call
counts as a call; ancestry is read from the recorded spans' parent links when the local
root ends, through spans of no stage or of other stages in between.

**Calls of one kind** do the same operation: the value of the first of
:data:`OPERATION_KEYS` a span carries (``execute_tool``, ``retrieval``, ``EMBEDDING``...),
or, with none of them, its name. Only calls of one kind could plausibly have run at
once; an embedding and the vector search that uses it are two kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from latency_budget._config.genai_defaults import CALL_KEYS, DIALECTS, STOP_AND_HANDOFF, StopOrHandoff
from latency_budget._core.call_facts import RawCall
from latency_budget._core.critical_path import RecordedSpan

__all__ = [
    "ALMOST_ENTIRELY",
    "MAX_TWIN_CANDIDATES",
    "OPERATION_KEYS",
    "bookkeeping_calls",
    "call_facts",
    "nested_calls",
    "operation_of",
    "repeated_operations",
    "same_operation",
    "started_together",
    "stop_or_handoff",
    "tool_name_of",
]

# The attributes that say which operation a GenAI span performs: every key of the dialect
# table whose values name stages, in its order (the first a span carries is read). The URL
# of an HTTP client row is no operation: such a span's kind is its name.
OPERATION_KEYS: tuple[str, ...] = tuple(dict.fromkeys(dialect.key for dialect in DIALECTS if dialect.values))


def operation_of(name: str, attributes: Mapping[str, object]) -> str:
    """The kind of call a stage span is: its operation attribute, else its name."""
    for key in OPERATION_KEYS:
        value = attributes.get(key)
        if value.__class__ is str:
            return value
    return name


def nested_calls(root_id: int, spans: Sequence[RecordedSpan], stages: Collection[int]) -> set[int]:
    """Positions in ``spans`` of the spans of ``stages`` that sit inside a recorded span of their own stage.

    ``spans`` are one local-root trace's recorded spans (the root, ``root_id``, among
    them). A span whose parent was not recorded starts a new line of ancestry: past that
    gap nothing is known, so it counts as outermost. Linear in the trace's size, whatever
    its depth; parent links that loop (ids reused within a trace) end the walk.
    """
    position: dict[int, int] | None = None  # span id -> position, built when a span is deeper than the root's children
    root_bits = 0  # the stages among the strict ancestors of the root's children: the root's own
    for span in reversed(spans):  # the root is recorded last
        if span[0] == root_id:
            if span[4] >= 0:
                root_bits = 1 << span[4]
            break
    # Position -> bit set of the stages among its recorded strict ancestors.
    ancestry: dict[int, int] = {}
    limit = len(spans)
    nested: set[int] = set()
    for index, span in enumerate(spans):
        stage = span[4]
        if stage < 0 or stage not in stages or span[0] == root_id:
            continue
        parent_id = span[1]
        if parent_id == root_id:  # the common case: a child of the root
            bits = root_bits
        else:
            if position is None:
                position = {recorded[0]: i for i, recorded in enumerate(spans)}
            bits = _ancestor_stages(index, root_id, spans, position, ancestry, limit)
        if bits >> stage & 1:
            nested.add(index)
    return nested


def _ancestor_stages(
    index: int,
    root_id: int,
    spans: Sequence[RecordedSpan],
    position: Mapping[int, int],
    ancestry: dict[int, int],
    limit: int,
) -> int:
    """The stages among the recorded strict ancestors of ``spans[index]``, as bits (memoised in ``ancestry``)."""
    path: list[int] = []
    current = index
    while current not in ancestry:
        span = spans[current]
        parent_id = span[1]
        parent = position.get(parent_id) if parent_id is not None and span[0] != root_id else None
        if parent is None or len(path) > limit:  # no recorded parent (or a loop): nothing above is known
            ancestry[current] = 0
            break
        path.append(current)
        current = parent
    bits = ancestry[current]
    for child in reversed(path):  # ``current`` is the parent of ``child``
        stage = spans[current][4]
        if stage >= 0:
            bits |= 1 << stage
        ancestry[child] = bits
        current = child
    return ancestry[index]


# -- two spans, one operation ----------------------------------------------------------------

# What names a call's target (a model, else a tool) and what says which request it was, in
# every spelling of the dialect table (CALL_KEYS) plus the ids the conventions write.
_TARGET_KEYS: tuple[str, ...] = (*CALL_KEYS.model, *CALL_KEYS.tool_name)
# Ids that name one call: equal, the same call (whatever else differs); different, two calls.
# The response id is the provider's; a tool call id is the model's.
_ID_KEYS: tuple[tuple[str, ...], ...] = (("gen_ai.response.id",), ("gen_ai.tool.call.id", "tool_call.id"))
# Facts that agree for one call but that two instrumentations may count or spell a little
# differently: evidence for one call when equal; the output length, when it differs by more
# than TOKEN_SLACK, evidence of two calls.
_COUNT_KEYS: tuple[tuple[str, ...], ...] = (CALL_KEYS.output_tokens,)
_SUPPORTING_KEYS: tuple[tuple[str, ...], ...] = (CALL_KEYS.input_tokens, CALL_KEYS.arguments)
ALMOST_ENTIRELY = 0.9
"""A span that names no target is a call's when at least this share of it lies within the call's span."""

TWIN_START_SLACK_MS = 10.0
"""Two instrumentations of one call start within this of each other (or 10% of the longer span, if more)."""

TWIN_END_SLACK_MS = 20.0
"""The later-starting of two instrumentations of one call ends at most this after the other (or 10% of the longer)."""

TOKEN_SLACK = 2
"""Two instrumentations' output token counts of one call may differ by this (OpenLLMetry adds message_start's)."""

MAX_TWIN_CANDIDATES = 16
"""How many of the latest-started open spans of its stage a span is compared with (a bound, not a rule)."""

_START_SLACK_NS = int(TWIN_START_SLACK_MS * 1e6)
_END_SLACK_NS = int(TWIN_END_SLACK_MS * 1e6)
_SHARE = 1 - ALMOST_ENTIRELY

Facts = tuple["str | None", tuple[object, ...], tuple[object, ...], tuple[object, ...]]


def call_facts(attributes: Mapping[str, object]) -> Facts:
    """What identifies one call across instrumentations: its target, its ids, its counts and its supporting facts."""
    get = attributes.get
    target = None
    for key in _TARGET_KEYS:
        value = get(key)
        if value.__class__ is str and value:
            target = value
            break
    return (
        target,
        tuple(_first_of(get, keys) for keys in _ID_KEYS),
        tuple(_first_of(get, keys) for keys in _COUNT_KEYS),
        tuple(_first_of(get, keys) for keys in _SUPPORTING_KEYS),
    )


def _first_of(get: Callable[[str], object], keys: tuple[str, ...]) -> object:
    for key in keys:
        value = get(key)
        if value is not None and (value.__class__ is not int or value >= 0):
            return value
    return None


def started_together(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    """Whether two spans are timed as two instrumentations of one call.

    They start within :data:`TWIN_START_SLACK_MS` of each other, the later one before the
    earlier ends, and the earlier one's interval contains the later one's up to
    :data:`TWIN_END_SLACK_MS` at the end (each slack at least 10% of the longer span).
    """
    if (b_start, b_end) < (a_start, a_end):
        a_start, a_end, b_start, b_end = b_start, b_end, a_start, a_end
    share = int(_SHARE * max(a_end - a_start, b_end - b_start))
    return (
        b_start - a_start <= max(_START_SLACK_NS, share)
        and b_start <= a_end
        and b_end - a_end <= max(_END_SLACK_NS, share)
    )


def same_operation(a: tuple[int, int, Facts], b: tuple[int, int, Facts]) -> bool:
    """Whether two same-stage spans, neither inside the other, describe one call.

    ``a`` and ``b`` are (start, end, :func:`call_facts`). Either both name the same target,
    are timed as one call (:func:`started_together`) and the evidence says one call: an
    equal id (response id, tool call id) decides for, a different one against; else output
    token counts more than :data:`TOKEN_SLACK` apart say two calls, and one equal fact
    (output or input tokens, arguments) is needed. Or one names no target (an HTTP client
    span to a provider) and lies within the other (:data:`ALMOST_ENTIRELY` of its own
    length): the call the other describes.
    """
    (a_start, a_end, (a_target, a_ids, a_counts, a_supporting)) = a
    (b_start, b_end, (b_target, b_ids, b_counts, b_supporting)) = b
    if a_target is None or b_target is None:
        if a_target is None and b_target is None:
            return False
        overlap = min(a_end, b_end) - max(a_start, b_start)
        start, end = (a_start, a_end) if a_target is None else (b_start, b_end)
        length = end - start
        return overlap >= ALMOST_ENTIRELY * length if length > 0 else max(a_start, b_start) <= min(a_end, b_end)
    if a_target != b_target or not started_together(a_start, a_end, b_start, b_end):
        return False
    for mine, theirs in zip(a_ids, b_ids, strict=True):
        if mine is not None and theirs is not None:
            return bool(mine == theirs)
    agreed = False
    for mine, theirs in zip(a_counts, b_counts, strict=True):
        if mine.__class__ is int and theirs.__class__ is int:
            if abs(mine - theirs) > TOKEN_SLACK:
                return False
            agreed = agreed or mine == theirs
    return agreed or any(
        mine is not None and mine == theirs for mine, theirs in zip(a_supporting, b_supporting, strict=True)
    )


def _facts(
    facts: dict[int, tuple[int, int, Facts]],
    spans: Sequence[RecordedSpan],
    attributes: Mapping[int, Mapping[str, object]],
    index: int,
) -> tuple[int, int, Facts]:
    """``spans[index]``'s times and call facts, read once (memoised in ``facts``)."""
    found = facts.get(index)
    if found is None:
        span_id, _, start, end, _ = spans[index]
        recorded = attributes.get(span_id)
        found = facts[index] = (start, end, call_facts(recorded) if recorded is not None else (None, (), (), ()))
    return found


def _find(parent: dict[int, int], i: int) -> int:
    """The root of ``i``'s group (union-find, halving the path)."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def repeated_operations(
    root_id: int,
    spans: Sequence[RecordedSpan],
    skip: Collection[int],
    attributes: Mapping[int, Mapping[str, object]],
    stages: Collection[int],
    scopes: Mapping[int, str],
) -> set[int]:
    """Positions in ``spans`` of stage spans that repeat another span's call (the same operation).

    Among the spans of ``stages`` but the root and those at positions ``skip`` (nested ones),
    :func:`same_operation` links pairs of one stage with one parent (siblings: two
    instrumentations of one call write it in one context) written by two instrumentations
    (two instrumentation scopes, ``scopes`` by span id: one instrumentation never writes one
    call twice, so two identical calls of one client stay two); each linked group is one call, kept at
    its earliest span (by start, end, then span id) and the others returned. ``attributes``
    gives a recorded stage span's attributes by span id. Only spans that overlap are
    compared (a sweep in start order), so sequential calls cost a sort; a span is compared
    with at most :data:`MAX_TWIN_CANDIDATES` of the latest-started spans still open (more
    than that many calls of one stage started at once: a twin among the earlier ones is
    not sought, and counts as a call of its own).
    """
    by_stage: dict[int, list[int]] = {}
    for index, span in enumerate(spans):
        if span[4] >= 0 and span[4] in stages and span[0] != root_id and index not in skip:
            by_stage.setdefault(span[4], []).append(index)
    repeated: set[int] = set()
    for positions in by_stage.values():
        if len(positions) < 2:
            continue
        positions.sort(key=lambda i: (spans[i][2], spans[i][3], spans[i][0]))
        parent = {i: i for i in positions}
        order = {i: rank for rank, i in enumerate(positions)}

        facts: dict[int, tuple[int, int, Facts]] = {}  # read only for spans that overlap enough
        active: list[int] = []
        for i in positions:
            _, _, start, end, _ = spans[i]
            # Twins start within a hair of each other: each span is compared with the latest
            # MAX_TWIN_CANDIDATES spans still open, so a fan-out of thousands stays linear.
            active = [j for j in active[-MAX_TWIN_CANDIDATES:] if spans[j][3] >= start]
            for j in active:
                # Two instrumentations of one call write it in one context: siblings (one
                # inside the other is nesting). Spans under different parents (two agents
                # calling one tool at once) are two calls, however alike.
                if spans[j][1] != spans[i][1]:
                    continue
                # Both ways of being one call need this timing: read the facts only then.
                other_start, other_end = spans[j][2], spans[j][3]
                overlap = min(end, other_end) - start
                if overlap < 0 or (
                    overlap < ALMOST_ENTIRELY * min(end - start, other_end - other_start)
                    and not started_together(other_start, other_end, start, end)
                ):
                    continue
                if scopes.get(spans[j][0]) == scopes.get(spans[i][0]):
                    continue
                if same_operation(_facts(facts, spans, attributes, j), _facts(facts, spans, attributes, i)):
                    first, second = _find(parent, j), _find(parent, i)
                    if order[second] < order[first]:
                        first, second = second, first
                    parent[second] = first  # a group's root is its earliest span
            active.append(i)
        for i in positions:  # in order: the first of each group is its root's representative
            if _find(parent, i) != i:
                repeated.add(i)
    return repeated


# -- bookkeeping written as tools --------------------------------------------------------------

_TOOL_NAME_KEYS: tuple[str, ...] = (*CALL_KEYS.tool_name, "traceloop.entity.name")
_ARGUMENT_KEYS: tuple[str, ...] = ("gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input")
_EXACT: Mapping[str, StopOrHandoff] = {row.name: row for row in STOP_AND_HANDOFF if not row.prefix}
_PREFIXES: tuple[StopOrHandoff, ...] = tuple(row for row in STOP_AND_HANDOFF if row.prefix)
_PREFIX_NAMES: tuple[str, ...] = tuple(row.name for row in _PREFIXES)
# What an empty call's arguments look like as the instrumentations write them (JSON, spaces removed).
_EMPTY_ARGUMENTS = frozenset({"", "{}", "[]", "null", '{"args":[],"kwargs":{}}'})


def tool_name_of(name: str, attributes: Mapping[str, object]) -> str:
    """The tool a tool-call span ran: its tool-name attribute, else its span name less the dialects' decorations."""
    for key in _TOOL_NAME_KEYS:
        value = attributes.get(key)
        if value.__class__ is str and value:
            return value
    if name.startswith("execute_tool "):
        return name[len("execute_tool ") :]
    return name.removesuffix(".tool")


def stop_or_handoff(name: str, attributes: Mapping[str, object]) -> StopOrHandoff | None:
    """The :data:`STOP_AND_HANDOFF` row a tool-call span is, or None for a tool that did work."""
    tool = tool_name_of(name, attributes)  # OpenInference's handoff span has no tool name: its span name
    row = _EXACT.get(tool)
    if row is None and tool.startswith(_PREFIX_NAMES):
        row = next(entry for entry in _PREFIXES if tool.startswith(entry.name))
    if row is not None and row.empty_arguments:
        for key in _ARGUMENT_KEYS:
            value = attributes.get(key)
            if value is not None:
                if value.__class__ is not str or "".join(value.split()) not in _EMPTY_ARGUMENTS:
                    return None
                break
    return row


def bookkeeping_calls(calls: Sequence[RawCall], names: Mapping[int, str], stage: str) -> set[int]:
    """Span ids of the ``stage`` calls (tool calls) that are a framework's stop signal, handoff or delegation."""
    found: set[int] = set()
    for span_id, call_stage, _, _, _, attributes in calls:
        if call_stage == stage and stop_or_handoff(names.get(span_id, ""), attributes) is not None:
            found.add(span_id)
    return found
