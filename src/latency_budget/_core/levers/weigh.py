"""Quality beside every lever: what a saving that would change answers is weighed against.

A lever whose change reaches the answers (``Lever.changes_answers``: a faster model,
a trimmed context, a shorter answer, fewer agent loops) claims its saving only where the
quality evidence does not speak against it. :func:`weigh_quality` compares two models'
:class:`~latency_budget._core.quality.QualityStats` in a stage (each evaluation that
counts under the budget file's ``quality``, the error rate, the guardrail block rate),
:func:`weigh_outcomes` two groups of requests (their success and evaluation scores), each
by a non-inferiority test (:mod:`~latency_budget._core.quality_test`). Where there is no
quality data to weigh a saving against, the lever says so in one clause,
:data:`NO_QUALITY_DATA`, rendered by :func:`quality_caveat` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from latency_budget._core.quality import Scores
from latency_budget._core.quality_test import Comparison, rate_not_worse, scores_not_worse

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.quality import CallQuality, QualityStats

__all__ = [
    "NO_QUALITY_DATA",
    "Outcome",
    "Weighed",
    "has_evidence",
    "outcome_of",
    "quality_caveat",
    "weigh_groups",
    "weigh_outcomes",
    "weigh_quality",
]

# The one clause a lever that could change answers adds where no quality data exists.
NO_QUALITY_DATA = "no quality data (evaluations, guardrail outcomes) to weigh it against"


def quality_caveat(requests: int, of: int) -> str:
    """The caveat for people: the clause, and in how many of the lever's requests it held (when not all)."""
    if requests >= of:
        return NO_QUALITY_DATA
    return f"{NO_QUALITY_DATA} in {plural(requests, 'request')} of {of}"


@dataclass(frozen=True, slots=True)
class Weighed:
    """What the quality evidence says of a change: each measure compared (the change's figures first).

    No comparison: nothing to weigh it against (:attr:`known` false).
    """

    comparisons: tuple[Comparison, ...] = ()

    @property
    def known(self) -> bool:
        """Whether any measure could be compared."""
        return bool(self.comparisons)

    @property
    def passed(self) -> bool:
        """Compared, and not worse by more than the tolerance on any measure."""
        return bool(self.comparisons) and all(c.passed for c in self.comparisons)

    @property
    def failed(self) -> tuple[Comparison, ...]:
        """The measures that did not pass."""
        return tuple(c for c in self.comparisons if not c.passed)

    def words(self, *, failed_only: bool = False) -> str:
        """``correctness 0.58 vs 0.91, n 120/118; error rate 0.02 vs 0.01, n 120/118``."""
        return "; ".join(c.words for c in (self.failed if failed_only else self.comparisons))

    def test(self, policy: QualityPolicy) -> str:
        """What the comparisons passed, for a lever's ``test``."""
        return (
            f"not worse on quality by more than the tolerance ({self.words()}; non-inferiority, one-sided "
            f"{100 * policy.significance:g}%)"
        )


def has_evidence(stats: QualityStats | None) -> bool:
    """Whether quality statistics say anything beyond a call count (an evaluation or a guardrail's judgement)."""
    return stats is not None and stats.evidence


def weigh_quality(candidate: QualityStats | None, current: QualityStats | None, policy: QualityPolicy) -> Weighed:
    """The candidate model's answers against the current one's, in one stage.

    Compared only where both sides have evidence: each evaluation that counts under
    ``policy`` and has scores on both sides, the guardrail block rate where a guardrail
    judged both, and then the error rate.
    """
    if candidate is None or current is None or not (candidate.evidence and current.evidence):
        return Weighed()
    alpha = policy.significance
    found: list[Comparison] = []
    for name in sorted(set(candidate.evaluations) & set(current.evaluations)):
        rule = policy.rule(name)
        if rule is None:
            continue
        higher, drop = rule
        compared = scores_not_worse(
            name,
            candidate.evaluations[name],
            current.evaluations[name],
            margin=drop,
            alpha=alpha,
            higher_is_better=higher,
        )
        if compared is not None:
            found.append(compared)
    if candidate.guarded and current.guarded:
        blocks = rate_not_worse(
            "guardrail block rate",
            (candidate.blocked, candidate.guarded),
            (current.blocked, current.guarded),
            margin=policy.max_drop,
            alpha=alpha,
            higher_is_better=False,
        )
        if blocks is not None:
            found.append(blocks)
    if found:  # the error rate only beside real evidence: alone, it says little of the answers
        errors = rate_not_worse(
            "error rate",
            (candidate.errors, candidate.calls),
            (current.errors, current.calls),
            margin=policy.max_drop,
            alpha=alpha,
            higher_is_better=False,
        )
        if errors is not None:
            found.append(errors)
    return Weighed(tuple(found))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What is known of one request's answer.

    ``succeeded``: no call ended in error, was blocked by a guardrail or refused by a
    content filter (span status and finish reasons are always recorded, so this is known
    of every request); ``scores`` the mean of each evaluation's scores over its calls;
    ``evidence``: an evaluation or a guardrail's judgement was recorded (quality data
    beyond errors).
    """

    succeeded: bool
    scores: tuple[tuple[str, float], ...] = ()
    evidence: bool = False


def outcome_of(qualities: Iterable[CallQuality | None], *, guardrails: Iterable[bool] = ()) -> Outcome:
    """A request's outcome from its calls' quality (a call the quality reader found nothing on succeeded) and,
    where not joined to a call yet, its guardrails' decisions (``True``: flagged)."""
    succeeded = True
    evidence = False
    for flagged in guardrails:
        evidence = True
        succeeded = succeeded and not flagged
    totals: dict[str, tuple[float, int]] = {}
    for quality in qualities:
        if quality is None:
            continue
        if quality.error or quality.blocked or quality.refused:
            succeeded = False
        if quality.blocked is not None:
            evidence = True
        for evaluation in quality.evaluations:
            if evaluation.score is not None:
                evidence = True
                total, n = totals.get(evaluation.name, (0.0, 0))
                totals[evaluation.name] = (total + evaluation.score, n + 1)
    return Outcome(succeeded, tuple((name, total / n) for name, (total, n) in sorted(totals.items())), evidence)


def weigh_outcomes(candidate: Sequence[Outcome], current: Sequence[Outcome], policy: QualityPolicy) -> Weighed:
    """The candidate requests' outcomes against the current ones': success rate, then each evaluation that counts."""
    return weigh_groups(
        (sum(o.succeeded for o in candidate), len(candidate)),
        (sum(o.succeeded for o in current), len(current)),
        _scores(candidate),
        _scores(current),
        policy,
    )


def weigh_groups(
    candidate: tuple[int, int],
    current: tuple[int, int],
    candidate_scores: Mapping[str, Scores],
    current_scores: Mapping[str, Scores],
    policy: QualityPolicy,
) -> Weighed:
    """Two groups of requests, each as (succeeded, of) and each evaluation's per-request scores."""
    alpha = policy.significance
    found: list[Comparison] = []
    success = rate_not_worse("success", candidate, current, margin=policy.max_drop, alpha=alpha, higher_is_better=True)
    if success is not None:
        found.append(success)
    for name in sorted(set(candidate_scores) & set(current_scores)):
        rule = policy.rule(name)
        if rule is None:
            continue
        higher, drop = rule
        compared = scores_not_worse(
            name, candidate_scores[name], current_scores[name], margin=drop, alpha=alpha, higher_is_better=higher
        )
        if compared is not None:
            found.append(compared)
    return Weighed(tuple(found))


def _scores(outcomes: Sequence[Outcome]) -> dict[str, Scores]:
    found: dict[str, Scores] = {}
    for outcome in outcomes:
        for name, value in outcome.scores:
            found[name] = found.get(name, Scores()).add(value)
    return found
