"""``cache``: calls identical to an earlier one, whose answer a cache could have given.

Calls identical to an earlier one (same stage, target and arguments, where the span
carries arguments), earlier in the same request or in an earlier one: the stage time they
took, if a cache hit cost nothing. Where calls of one identity recorded different results
(``Call.result``), a cache would change the answer: none of them counts. Where the results
were not recorded, they are assumed identical, and the finding says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.levers.baseline import DIFFERING, Result, merged_result
from latency_budget._core.levers.finding import Finding, capped_saving
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ModelStats

__all__ = ["CACHE_ASSUMED", "CACHE_RESULTS", "LEVER", "find"]


CACHE_RESULTS = "identical_results"  # the cache hint's basis: every repeated call's results recorded, and equal
CACHE_ASSUMED = "results_not_recorded"  # ... some not recorded: identical results assumed


def find(
    stage: str,
    members: Sequence[Call],
    baseline: Baseline,
    cap: float,
    stats: dict[str, ModelStats | None],
    policy: QualityPolicy,
) -> Finding | None:
    """The cache lever in one stage: calls identical to an earlier one, here or in an earlier request."""
    # What each identity returned, here and in earlier requests: a call whose identical
    # calls returned different results is not one a cache could answer.
    results: dict[int, Result] = {}
    for call in members:
        key = call.key
        if key is not None:
            before = results[key] if key in results else baseline.result(key)
            results[key] = merged_result(before, call.result)
    here: set[int] = set()  # identities called earlier in this request
    repeated: dict[int, int] = {}  # index -> 0: the call would not be made
    within = 0
    assumed = False  # a repeated identity whose results were not recorded
    targets: dict[str, None] = {}
    for index, call in enumerate(members):
        key = call.key
        if key is None:
            continue
        if key in here:
            within_request = True
        elif not baseline.seen(key):
            here.add(key)
            continue
        else:
            within_request = False
        here.add(key)
        returned = results[key]
        if returned == DIFFERING:
            continue
        within += within_request
        assumed = assumed or returned is None
        repeated[index] = 0
        if call.target is not None:
            targets[call.target] = None
    outcome = capped_saving(members, repeated, cap)
    if outcome is None:  # identical calls side by side: a cache would not shorten the stage
        return None
    saving, ids = outcome
    if assumed:
        test, basis = (
            "identical stage, target and arguments; assumes identical results; results not recorded",
            CACHE_ASSUMED,
        )
    else:
        test, basis = "identical stage, target, arguments and recorded results", CACHE_RESULTS
    return Finding("cache", stage, len(repeated), saving, len(repeated), tuple(targets), None, within, ids, test, basis)


def advise(given: AdviceFor) -> Advice:
    """The cache's basis and advice over a recording."""
    earlier = given.repeats - given.within
    basis = (
        f"{plural(given.repeats, 'call')} identical to an earlier one ({given.within} within a request, "
        f"{earlier} from an "
        "earlier request), if a cache hit cost nothing"
    )
    return basis, f"cache the results of {given.named}: identical calls repeat"


LEVER = Lever(
    name="cache",
    estimated=True,
    saves="end_to_end",
    text="{calls} repeated an identical earlier call; a cache would save about {saving}",
    unit="call",
    changes="cache",
    fits="calls with arguments identical to an earlier call's (same stage, target and arguments), in the same "
    "request or an earlier one",
    controls_for="calls of one identity that recorded different results are left out (a cache would change the "
    "answer); where results are not recorded it says it assumes them identical",
    evidence="recorded results of the identical calls; the answer's freshness is the team's call",
    never="caching a protected stage's calls",
    needs=("recorded_results",),
    advise=advise,
    find_in_stage=find,
    keyed=True,
)
