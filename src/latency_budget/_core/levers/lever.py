"""The one interface every latency lever has: what it changes, what it says, what it rests on.

A lever is a module of this package that defines ``LEVER``, a :class:`Lever`, and the
function that finds it; :data:`~latency_budget._core.levers.LEVERS` lists them, and every
consumer (the processor, ``report``, the HTML page, the demo) reads that table. The
fields that are words for people are also docs/levers.md's table, checked against it
by ``tests/unit/test_lever_registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.call_facts import Call
    from latency_budget._core.kinds import HintKind, Saves
    from latency_budget._core.levers.baseline import Baseline, ModelStats, RecordedBaseline
    from latency_budget._core.levers.finding import Finding
    from latency_budget._core.report import TraceReport

__all__ = ["ANSWER_CHANGES", "Advice", "AdviceFor", "Change", "Evidence", "Lever", "RequestFinder", "StageFinder"]

# What a lever would do to a stage's work. A protected stage's work is never changed, by
# any of them: ``stream`` is held back also when a protected stage's check follows the call.
Change = Literal[
    "stream",
    "cache",
    "swap_model",
    "trim_input",
    "shorten_output",
    "reduce_reasoning",
    "run_concurrently",
    "skip_calls",
]
# The changes that reach the answers themselves: a lever making one weighs its saving
# against the quality evidence, and says so where there is none (levers/weigh.py). The
# others keep the answer: a stream shows the same text sooner, a cache returns what an
# identical call returned (its lever checks the recorded results), and concurrent calls
# are only those found independent (their lever checks arguments and results).
ANSWER_CHANGES: frozenset[Change] = frozenset(
    ("swap_model", "trim_input", "shorten_output", "reduce_reasoning", "skip_calls")
)

# The quality evidence a lever needs before a saving may be claimed as free of cost to the
# answers (read from the traces by issue 46's quality reader; until then a lever says so).
Evidence = Literal[
    "evaluation_scores",  # gen_ai.evaluation.result: a named score per evaluated call
    "guardrail_outcomes",  # what guardrails decided about the calls' answers
    "error_status",  # span status and errors of the calls
    "finish_reasons",  # length, content_filter: an answer cut or refused
    "recorded_results",  # what identical calls returned (a cache that changes no answer)
    "task_success",  # whether the request as a whole succeeded (agents' loops)
]


@dataclass(frozen=True, slots=True)
class AdviceFor:
    """What a lever's advice for people rests on: one lever in one stage over a whole recording.

    ``main`` is the model, tool or data source involved most often (``None``: none named),
    ``stats`` that model's statistics in the stage, ``named`` the targets as a phrase for a
    sentence. ``estimated`` counts the requests where it gave a saving, ``unestimated``
    those where it applied without an estimate, ``held_back`` those where a protected
    stage's check held its saving back;
    ``repeats`` and ``within`` are the cache lever's repeated calls (``within`` a request);
    ``assumed`` counts the requests where ``sequential_calls`` assumed its calls independent,
    ``cached`` those where ``context_size`` counted only the tokens after a cached prefix.
    ``unweighed`` counts the requests where a lever that changes answers had no quality
    data to weigh its saving against, ``not_recommended`` those where the quality evidence
    spoke against it (no saving claimed).
    """

    stage: str
    main: str | None
    stats: ModelStats | None
    named: str
    baseline: RecordedBaseline
    estimated: int = 0
    unestimated: int = 0
    held_back: int = 0
    held_back_by: tuple[str, ...] = ()
    repeats: int = 0
    within: int = 0
    assumed: int = 0
    cached: int = 0
    unweighed: int = 0
    not_recommended: int = 0


# (basis, advice): what the estimate rests on and what to try, each for people.
Advice = tuple[str, str]

# An estimated lever that looks at the whole request: its calls (start order), the judged
# report, the baseline, each modelled stage's (time, most a total-time lever may save), the
# protected stages. The streaming lever is one.
RequestFinder = Callable[
    ["Sequence[Call]", "TraceReport", "Baseline", "Mapping[str, tuple[float, float]]", "frozenset[str]"],
    "Finding | None",
]
# An estimated lever that looks at one stage: its name, its calls (start order), the
# baseline, the most it may save, its models' statistics (filled in on first use), and
# what a saving that changes answers is weighed against (the budget file's ``quality``).
StageFinder = Callable[
    [str, "Sequence[Call]", "Baseline", float, "dict[str, ModelStats | None]", "QualityPolicy"], "Finding | None"
]


@dataclass(frozen=True, slots=True)
class Lever:
    """One latency lever: a row of the table every consumer reads.

    ``estimated``: from the calls seen before (the baseline), else from the trace's shape
    (:mod:`latency_budget._core.hints` finds those). ``saves``: whose time it saves, the
    whole request's or its first token's. ``text``: the hint's one line, with ``{calls}``
    (``3 calls``) and ``{saving}`` (``230ms``); ``unit``: what the estimate scales with.
    ``changes``: what it would do to a stage's work (never to a protected stage's).
    ``fits``, ``controls_for``, ``evidence`` and ``never`` are docs/levers.md's words: where it
    applies, what its estimate holds fixed or rules out, the quality evidence it needs
    before a saving can be called free, and what it never proposes. ``needs`` names that
    evidence for the code. ``advise`` gives ``report``'s basis and advice; an estimated
    lever has ``find_in_request`` or ``find_in_stage`` (and ``keyed``: it reads only stages
    with a call that has arguments; ``reasoned``: only stages with a call that records
    reasoning tokens; else only stages with a model call).
    """

    name: HintKind
    estimated: bool
    saves: Saves
    text: str
    unit: str
    changes: Change
    fits: str
    controls_for: str
    evidence: str
    never: str
    needs: tuple[Evidence, ...]
    advise: Callable[[AdviceFor], Advice]
    find_in_request: RequestFinder | None = None
    find_in_stage: StageFinder | None = None
    keyed: bool = False
    reasoned: bool = False

    @property
    def changes_answers(self) -> bool:
        """Whether its change reaches the answers (:data:`ANSWER_CHANGES`): its saving is weighed against quality."""
        return self.changes in ANSWER_CHANGES

    def __post_init__(self) -> None:
        finders = (self.find_in_request is not None) + (self.find_in_stage is not None)
        if finders != (1 if self.estimated else 0):
            raise ValueError(f"lever {self.name}: an estimated lever has one finder, a lever of the shape none")
