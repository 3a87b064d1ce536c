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

from collections.abc import Collection, Mapping, Sequence

from latency_budget._config.genai_defaults import DIALECTS
from latency_budget._core.critical_path import RecordedSpan

__all__ = ["OPERATION_KEYS", "nested_calls", "operation_of"]

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
