"""``sequential_calls``: calls that ran one after another where they could have run together.

Under one parent, two or more consecutive calls of a parallelizable stage, of one kind (the
same operation), ran one after another, with no overlap and no stage span of another stage
or kind between them. Run concurrently, each run's calls would all start when its first did.
Only calls that could run together count: a call of a tool the budget file marks as having
side effects (``tools: {side_effects: [glob, ...]}``) is in no run, and a call whose
recorded arguments hold an earlier call's recorded result (the whole of it, or a string or
number in it, of at least :data:`MIN_LEAF_CHARS` characters) starts a run of its own: it
needed that result first. Where the calls' arguments or results are not recorded, the
calls are assumed independent, and ``report`` says so.
The saving is wall-clock: the stage's union before, minus its union with every run made
concurrent at once (runs in concurrent sub-agents overlap, and count once), at most the
stage's time on the critical path. Read from the trace's shape by
:func:`latency_budget._core.hints.find_hints`.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from latency_budget._config.genai_defaults import CALL_KEYS
from latency_budget._core.intervals import union_length
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.levers.shape import capped, stage_calls

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._core.critical_path import RecordedSpan

__all__ = ["LEVER", "MIN_LEAF_CHARS", "CallText", "call_text", "find"]

# (tool name, arguments, result) of a stage span, each as recorded (None: not recorded).
CallText = tuple["str | None", "str | None", "str | None"]
MIN_LEAF_CHARS = 3  # a shorter string or number in a result ("ok", 1) says nothing about data flow
_MAX_LEAVES = 64  # leaves of a result compared with the next call's arguments, at most
# The recorded results of the run's latest calls that a call's arguments are compared with, at
# most: the check stays linear in a run's calls (a run of thousands of calls that all
# record results would otherwise compare every pair). A call that needs the result of a
# call further back in the run is then taken as independent.
MAX_RESULTS_COMPARED = 64
_NO_TEXTS: Mapping[int, CallText] = {}

# A stage span among its siblings: (start, end, span id, stage, kind, nested, the span).
_Sibling = tuple[int, int, int, int, "str | None", bool, "RecordedSpan"]


def call_text(attributes: Mapping[str, object]) -> CallText:
    """A stage span's tool name, arguments and result, in the dialect table's spellings (the first a span has)."""
    return (
        _first(attributes, CALL_KEYS.tool_name),
        _first(attributes, CALL_KEYS.arguments),
        _first(attributes, CALL_KEYS.results),
    )


def _first(attributes: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if value.__class__ is str and value:
            return value
    return None


def find(
    spans: Sequence[RecordedSpan],
    root_id: int,
    parallelizable: AbstractSet[int],
    of_kind: Mapping[int, str],
    nested: AbstractSet[int],
    critical_ns: Sequence[int] | None,
    texts: Mapping[int, CallText] = _NO_TEXTS,
    side_effects: tuple[re.Pattern[str], ...] = (),
) -> list[tuple[int, float, list[RecordedSpan], bool]]:
    """Per stage index with sequential runs: (index, saving ms, the spans of its runs in start order, checked).

    ``parallelizable`` holds the stage indexes that may have a run; ``of_kind`` maps span
    ids to their kind of call (calls without one are all of one kind); ``texts`` their tool
    names, arguments and results, ``side_effects`` the tools never to run concurrently.
    ``checked`` is true when every call of the runs recorded its arguments and result, so
    that their independence was checked, not assumed.
    """
    changes = _changes_something(side_effects)
    by_parent: dict[int, list[_Sibling]] = {}
    for index, span in enumerate(spans):
        span_id, parent_id, start, end, stage = span
        if stage >= 0 and span_id != root_id and parent_id is not None:
            sibling = (start, end, span_id, stage, of_kind.get(span_id), index in nested, span)
            group = by_parent.get(parent_id)
            if group is None:
                by_parent[parent_id] = [sibling]
            else:
                group.append(sibling)
    runs: dict[int, list[list[_Sibling]]] = {}  # stage index -> its sequential runs
    for siblings in by_parent.values():
        if len(siblings) >= 2:
            for run in _sequential_runs(siblings, parallelizable, texts, changes):
                runs.setdefault(run[0][3], []).append(run)
    found: list[tuple[int, float, list[RecordedSpan], bool]] = []
    for index, stage_runs in runs.items():
        calls = stage_calls(spans, index, nested)
        moved: dict[int, tuple[int, int]] = {}  # span id -> its interval with its run made concurrent
        for run in stage_runs:
            first = run[0][0]
            for start, end, span_id, *_ in run:
                moved[span_id] = (first, first + max(0, end - start))
        after = [moved.get(span[0], (span[2], span[3])) for span in calls]
        savings = capped(union_length([(s[2], s[3]) for s in calls]) - union_length(after), index, critical_ns)
        in_runs = sorted((sibling for run in stage_runs for sibling in run), key=_start_order)
        checked = all(_recorded(texts.get(sibling[2])) for sibling in in_runs)
        found.append((index, savings, [sibling[6] for sibling in in_runs], checked))
    return found


def _recorded(text: CallText | None) -> bool:
    return text is not None and text[1] is not None and text[2] is not None


def _changes_something(side_effects: tuple[re.Pattern[str], ...]) -> Callable[[CallText | None], bool]:
    """Whether a call is of a tool with side effects (its name matches one of the globs)."""

    def changes(text: CallText | None) -> bool:
        tool = text[0] if text is not None else None
        return tool is not None and any(glob.fullmatch(tool) for glob in side_effects)

    return changes


def _leaves(result: str) -> list[str]:
    """The strings and numbers in a JSON result (a plain result is one), at least MIN_LEAF_CHARS long."""
    try:
        value = json.loads(result)
    except ValueError:
        return [result] if len(result) >= MIN_LEAF_CHARS else []
    found: list[str] = []
    stack = [value]
    while stack and len(found) < _MAX_LEAVES:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str | int | float) and not isinstance(item, bool):
            text = item if isinstance(item, str) else json.dumps(item)
            if len(text) >= MIN_LEAF_CHARS:
                found.append(text)
    return found


def _feeds(earlier: CallText | None, later: CallText | None) -> bool:
    """Whether ``later``'s recorded arguments hold ``earlier``'s recorded result, or a string or number in it."""
    if earlier is None or later is None or earlier[2] is None or later[1] is None:
        return False
    result, arguments = earlier[2], later[1]
    return result in arguments or any(leaf in arguments for leaf in _leaves(result))


def _sequential_runs(
    siblings: list[_Sibling],
    parallelizable: AbstractSet[int],
    texts: Mapping[int, CallText] = _NO_TEXTS,
    changes: Callable[[CallText | None], bool] = lambda _: False,
) -> list[list[_Sibling]]:
    """Runs of two or more back-to-back, non-overlapping, independent calls of one stage and kind among siblings."""
    found: list[list[_Sibling]] = []
    siblings.sort(key=_start_order)
    run: list[_Sibling] = []
    run_end = 0  # the latest end in the run: a call starting at or after it does not overlap
    # The recorded texts of the run's latest calls that recorded a result (the only ones a
    # later call can be fed by), at most MAX_RESULTS_COMPARED.
    results: deque[CallText] = deque(maxlen=MAX_RESULTS_COMPARED)

    def close() -> None:
        if len(run) >= 2:
            found.append(run)

    for sibling in siblings:
        start, end, span_id, stage, kind, nested, _ = sibling
        text = texts.get(span_id) if texts else None
        # A tool with side effects is in no run, and ends one as another stage's span would.
        blocked = nested or (text is not None and changes(text))
        if run and stage == run[0][3] and kind == run[0][4] and not blocked:
            if start >= run_end:
                if text is not None and any(_feeds(earlier, text) for earlier in results):
                    close()  # it needed an earlier call's result: a run of its own starts here
                    run = [sibling]
                    results.clear()
                else:
                    run.append(sibling)
                if text is not None and text[2] is not None:
                    results.append(text)
                run_end = max(run_end, end)
            else:
                # Overlaps the run: these calls already run concurrently; no hint for this group.
                run = []
                results.clear()
            continue
        close()
        # A nested span is part of a call, not a call: it starts no run, but as a step of
        # another call between two calls, it still ends one.
        run = [sibling] if stage in parallelizable and not blocked else []
        results.clear()
        if run and text is not None and text[2] is not None:
            results.append(text)
        run_end = end
    close()
    return found


def _start_order(sibling: _Sibling) -> tuple[int, int, int]:
    return sibling[0], sibling[1], sibling[2]  # start, then end, then span id


def advise(given: AdviceFor) -> Advice:
    """Sequential calls' basis and advice over a recording."""
    basis = "back-to-back sibling calls, each run made concurrent: the stage's time before less after"
    if given.assumed:
        basis += (
            f"; assumes the calls independent in {plural(given.assumed, 'request')} (their arguments or results not "
            "recorded): check that none needs another's result"
        )
    else:
        basis += "; no call's recorded arguments held an earlier call's recorded result"
    return basis, f"run independent {given.stage} spans concurrently (asyncio.gather, a thread pool)"


LEVER = Lever(
    name="sequential_calls",
    estimated=False,
    saves="end_to_end",
    text="{calls} ran one after another; run concurrently they would save {saving}",
    unit="call",
    changes="run_concurrently",
    fits="two or more back-to-back calls of one kind under one parent, in a stage marked parallelizable",
    controls_for="only calls of one kind (the same operation) with no other stage's span between them; a call "
    "whose recorded arguments hold an earlier call's recorded result starts a run of its own, and a tool marked "
    "with side effects (tools.side_effects) is in no run; the saving is wall-clock and capped at the stage's "
    "critical-path time",
    evidence="the calls' recorded arguments and results (where they are not recorded it assumes the calls "
    "independent, and says so) and the budget file's list of tools with side effects",
    never="running a protected stage's calls concurrently, or in another order",
    needs=("recorded_results",),
    advise=advise,
)
