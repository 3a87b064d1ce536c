"""What the telemetry says of the answers' quality: the quality reader's output, the levers' input.

Issue 46 splits the work in two: the *reader* turns evaluation results
(``gen_ai.evaluation.result`` span events and log records), guardrail outcomes, span
error status and finish reasons into a :class:`CallQuality` per call and a
:class:`QualityStats` per model in a stage; the *levers* read those through
:meth:`Baseline.quality <latency_budget._core.levers.baseline.Baseline.quality>` and never
claim a saving that the quality evidence speaks against. These types are the contract
between the two; neither side reads the other's internals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CallQuality", "Evaluation", "QualityStats", "Scores"]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation result of one call: ``gen_ai.evaluation.name``, its score value and label.

    ``score`` is ``None`` when the evaluator gave only a label.
    """

    name: str
    score: float | None
    label: str | None


@dataclass(slots=True)
class CallQuality:
    """What is known of one call's answer (read-only once the reader has joined it).

    ``blocked``: a guardrail judged the answer and blocked or flagged it (``None``: no
    guardrail judged it). ``cut``: the answer stopped at the length limit (finish reason
    ``length``); ``refused``: a content filter stopped it (``content_filter``).
    """

    evaluations: tuple[Evaluation, ...] = ()
    error: bool = False
    blocked: bool | None = None
    cut: bool = False
    refused: bool = False


@dataclass(frozen=True, slots=True)
class Scores:
    """Running statistics of one evaluation's numeric scores (Welford): ``n``, ``mean``, ``m2``."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> Scores:
        """These statistics with one more score."""
        n = self.n + 1
        delta = value - self.mean
        mean = self.mean + delta / n
        return Scores(n, mean, self.m2 + delta * (value - mean))

    @property
    def variance(self) -> float:
        """The sample variance (0 below two scores)."""
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The mean's normal-approximation confidence interval (95% by default)."""
        half = z * math.sqrt(self.variance / self.n) if self.n > 1 else math.inf
        return self.mean - half, self.mean + half


@dataclass(frozen=True, slots=True)
class QualityStats:
    """What the answers of one model in one stage are known to be worth.

    ``calls`` counts the calls looked at; ``evaluations`` each evaluation's numeric scores by
    name; ``errors`` the calls with error status; ``guarded`` the calls a guardrail judged
    and ``blocked`` those it blocked; ``cut`` and ``refused`` the finish reasons ``length``
    and ``content_filter``.
    """

    calls: int
    evaluations: Mapping[str, Scores] = field(default_factory=dict)
    errors: int = 0
    guarded: int = 0
    blocked: int = 0
    cut: int = 0
    refused: int = 0

    @property
    def error_rate(self) -> float | None:
        """Errors per call (``None`` with no calls)."""
        return self.errors / self.calls if self.calls else None

    @property
    def block_rate(self) -> float | None:
        """Blocked per guarded call (``None`` when no guardrail judged a call)."""
        return self.blocked / self.guarded if self.guarded else None

    @property
    def evidence(self) -> bool:
        """Whether anything beyond the call count is known: an evaluation or a guardrail's judgement."""
        return bool(self.evaluations) or self.guarded > 0
