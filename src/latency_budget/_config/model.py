"""The loaded, immutable form of a budget file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget._config.matching import MatchRule, StageClassifier

__all__ = [
    "DEFAULT_MIN_SAVING_MS",
    "DEFAULT_PROFILE",
    "DEFAULT_QUALITY",
    "MODEL_STAGE",
    "BudgetConfig",
    "BudgetSet",
    "EvaluationRule",
    "FirstTokenSource",
    "Profile",
    "QualityPolicy",
    "Severity",
    "StageBudget",
    "StageDefinition",
]

Severity = Literal["warn", "error"]
TimeUnit = Literal["s", "ms", "us", "ns", "iso8601"]

DEFAULT_PROFILE = "default"
# The stage whose calls make a local root a request under the default ``requests`` rule.
MODEL_STAGE = "model_call"
# Hints that would save less than this are not given: sub-millisecond savings are noise.
DEFAULT_MIN_SAVING_MS = 5.0
# A lever that changes answers claims its saving only where they are not worse by more
# than this (absolute: on a 0-1 score, five points), shown at this one-sided level.
DEFAULT_MAX_DROP = 0.05
DEFAULT_SIGNIFICANCE = 0.05


@dataclass(frozen=True, slots=True)
class EvaluationRule:
    """One entry of ``quality.evaluations``: the evaluations it names (a glob), and how they are read.

    ``max_drop`` ``None``: the policy's.
    """

    glob: str
    pattern: re.Pattern[str]
    higher_is_better: bool = True
    max_drop: float | None = None


@dataclass(frozen=True, slots=True)
class QualityPolicy:
    """The budget file's ``quality`` section: what a lever that changes answers weighs its saving against.

    ``evaluations`` ``None`` (no list in the file): every evaluation counts, higher is
    better. ``max_drop`` is the absolute drop tolerated in a score, and in a rate of
    errors, guardrail blocks or request success; ``significance`` the one-sided level at
    which "worse by more than that" must be rejected.
    """

    evaluations: tuple[EvaluationRule, ...] | None = None
    max_drop: float = DEFAULT_MAX_DROP
    significance: float = DEFAULT_SIGNIFICANCE

    def rule(self, name: str) -> tuple[bool, float] | None:
        """(higher is better, tolerated drop) for the evaluation called ``name``; ``None``: it does not count."""
        if self.evaluations is None:
            return True, self.max_drop
        for rule in self.evaluations:
            if rule.pattern.match(name):
                return rule.higher_is_better, self.max_drop if rule.max_drop is None else rule.max_drop
        return None


DEFAULT_QUALITY = QualityPolicy()


@dataclass(frozen=True, slots=True)
class FirstTokenSource:
    """Where a stage span records its time to first token.

    Exactly one of ``attribute`` (a duration in ``unit`` from the span's start, or an
    ISO-8601 timestamp when ``unit`` is ``iso8601``) and ``event`` (an event name whose
    timestamp is the first-token instant) is set. With ``scope``, only spans of that
    instrumentation scope are read.
    """

    attribute: str | None = None
    unit: TimeUnit = "s"
    event: str | None = None
    # Only on spans of this instrumentation scope (one name may mean two units: a
    # framework that writes a semantic-convention metric's name in its own unit).
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class StageBudget:
    """A stage's budgets under one profile. ``budget_ms=None`` tracks without judging.

    ``objective`` is the share of the requests running the stage (a fraction below 1)
    that must stay within all its budgets; it drives alerting, never the verdict.
    """

    name: str
    budget_ms: float | None
    first_token_ms: float | None = None
    max_calls: int | None = None
    severity: Severity = "error"
    parallelizable: bool = False
    objective: float | None = None
    # No lever caches, skips, shortens or moves its work, or streams output ahead of it.
    protected: bool = False
    # What a span of this stage carries from its start (see the attribute contract),
    # built once here rather than on every span.
    label: Mapping[str, str | float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        label: dict[str, str | float] = {attr.STAGE: self.name}
        if self.budget_ms is not None:
            label[attr.STAGE_BUDGET_MS] = float(self.budget_ms)
        object.__setattr__(self, "label", MappingProxyType(label))

    @property
    def has_budget(self) -> bool:
        """Whether the stage has any budget to judge (time, first token or calls)."""
        return self.budget_ms is not None or self.first_token_ms is not None or self.max_calls is not None


@dataclass(frozen=True, slots=True)
class StageDefinition:
    """How spans of a stage are recognised; shared by every profile.

    ``rules`` are the stage's own ``match`` rules followed, when ``builtin`` is true, by
    the built-in rules of its name (``builtin: false`` in the file leaves them out).
    """

    name: str
    rules: tuple[MatchRule, ...]
    first_token: tuple[FirstTokenSource, ...] = ()
    builtin: bool = False
    # The attributes ``first_token`` reads, and its event sources in order: a span that
    # carries none of those attributes (most stage spans) is read from the events alone,
    # without a pass over every source (trace_state.end_span).
    first_token_keys: frozenset[str] = field(init=False, repr=False, compare=False)
    first_token_events: tuple[FirstTokenSource, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = frozenset(source.attribute for source in self.first_token if source.attribute is not None)
        object.__setattr__(self, "first_token_keys", keys)
        events = tuple(source for source in self.first_token if source.attribute is None)
        object.__setattr__(self, "first_token_events", events)


@dataclass(frozen=True, slots=True)
class BudgetSet:
    """The effective budgets of one profile, one entry per stage in config order.

    ``total_objective`` and ``first_token_objective`` are the shares of requests (fractions
    below 1) that must stay within ``total_ms`` and ``first_token_ms``; alerting only.
    """

    profile: str
    stages: tuple[StageBudget, ...]
    total_ms: float | None
    first_token_ms: float | None = None
    severity: Severity = "error"
    total_objective: float | None = None
    first_token_objective: float | None = None
    min_saving_ms: float = DEFAULT_MIN_SAVING_MS  # the least a hint must save to be given
    # Tools (globs on the tool's name) that change something: never advised to run concurrently.
    side_effects: tuple[re.Pattern[str], ...] = ()
    # What a lever that changes answers weighs its saving against (the file's ``quality``).
    quality: QualityPolicy = DEFAULT_QUALITY
    # (stage index, the fewest calls of it that can give a hint), for stages that can:
    # lets a trace with nothing to hint (most traces) skip the hint search.
    hint_thresholds: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    # The indexes of the protected stages, whose spans no lever reads (and their names).
    protected_indexes: frozenset[int] = field(init=False, repr=False, compare=False)
    protected_stages: frozenset[str] = field(init=False, repr=False, compare=False)
    # (index, max_calls) of each stage with a max_calls that a lever may read: the stages
    # whose requests' success, with few calls and with many, the iterations hint is weighed on.
    limited: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        thresholds = []
        for index, budget in enumerate(self.stages):
            if budget.protected:
                continue  # no hint of the trace's shape moves or skips a protected stage's work
            least = [2] if budget.parallelizable else []
            if budget.max_calls is not None:
                least.append(budget.max_calls + 1)
            if least:
                thresholds.append((index, min(least)))
        object.__setattr__(self, "hint_thresholds", tuple(thresholds))
        protected = {index: budget.name for index, budget in enumerate(self.stages) if budget.protected}
        object.__setattr__(self, "protected_indexes", frozenset(protected))
        object.__setattr__(self, "protected_stages", frozenset(protected.values()))
        limited = tuple(
            (index, budget.max_calls)
            for index, budget in enumerate(self.stages)
            if budget.max_calls is not None and not budget.protected
        )
        object.__setattr__(self, "limited", limited)

    def stage(self, name: str) -> StageBudget:
        """The budget of the stage called ``name`` (``KeyError`` when unknown)."""
        for budget in self.stages:
            if budget.name == name:
                return budget
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Profile:
    """Other budgets for requests whose local root span matches ``when``."""

    name: str
    when: MatchRule
    budgets: BudgetSet


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """A validated budget file: stage definitions, default budgets and profiles."""

    source: str
    stages: tuple[StageDefinition, ...]
    default: BudgetSet
    profiles: tuple[Profile, ...] = ()
    # Which local roots are requests (any rule matches); None: the default rule (see
    # ``judged_by_default``), or every local root with ``every_root`` (``requests: all``).
    requests: tuple[MatchRule, ...] | None = None
    every_root: bool = False
    classifier: StageClassifier = field(init=False, repr=False, compare=False)
    stage_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    # The resource attribute keys that some rule reads (empty: the common case, and a
    # config resolved for one resource), and the configs resolved so far, by their values.
    resource_keys: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _by_resource: dict[tuple[object, ...], BudgetConfig] = field(init=False, repr=False, compare=False)
    # The position of the ``model_call`` stage when the default rule is in force (it
    # judges a local root that contains a model call), else -1: every root is judged.
    default_rule_stage: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rules = [(i, rule) for i, stage in enumerate(self.stages) for rule in stage.rules]
        object.__setattr__(self, "classifier", StageClassifier(rules))
        object.__setattr__(self, "stage_index", {stage.name: i for i, stage in enumerate(self.stages)})
        every = [rule for _, rule in rules] + list(self.requests or ()) + [p.when for p in self.profiles]
        keys = dict.fromkeys(key for rule in every for key, _ in rule.resource)
        object.__setattr__(self, "resource_keys", tuple(keys))
        object.__setattr__(self, "_by_resource", {})
        default = self.requests is None and not self.every_root
        object.__setattr__(self, "default_rule_stage", self.stage_index.get(MODEL_STAGE, -1) if default else -1)

    def for_resource(self, resource: Mapping[str, object]) -> BudgetConfig:
        """This config for the spans of one resource (a process, a service): its ``resource`` rules settled.

        Itself when no rule reads the resource. Otherwise a config whose rules that
        ``resource`` satisfies lose their resource conditions and whose other such rules
        are gone (a profile's ``when`` then never holds); the stages keep their names and
        order and the budgets are the same objects, so spans of several resources add up in
        one trace.
        Resolved once per distinct value of the keys read (at most 1,024 kept).
        """
        keys = self.resource_keys
        if not keys:
            return self
        values = tuple(_key_of(resource.get(key, _ABSENT)) for key in keys)
        found = self._by_resource.get(values)
        if found is None:
            found = _resolve(self, resource)
            if len(self._by_resource) < _MAX_RESOLVED:
                self._by_resource[values] = found
        return found

    @property
    def stage_names(self) -> tuple[str, ...]:
        """Stage names in config order."""
        return tuple(stage.name for stage in self.stages)

    def is_request(self, name: str, kind: SpanKind, scope: str, attributes: Mapping[str, object]) -> bool:
        """Whether a local root with these properties is accounted, under the file's ``requests`` rules.

        With no rules every root is accounted; under the default rule the root's end
        decides whether it is judged (``genai_defaults.plausible_request``).
        """
        requests = self.requests
        if requests is None:
            return True
        for rule in requests:  # noqa: SIM110 (at every root's start: no generator frame)
            if rule.matches(name, kind, scope, attributes):
                return True
        return False

    def budgets_for_root(self, name: str, kind: SpanKind, scope: str, attributes: Mapping[str, object]) -> BudgetSet:
        """The budgets of the first profile whose ``when`` matches this root, or the default."""
        for profile in self.profiles:
            if profile.when.matches(name, kind, scope, attributes):
                return profile.budgets
        return self.default

    def budgets_by_profile(self, profile: str) -> BudgetSet:
        """The budget set of a named profile (``default`` for the top level)."""
        if profile == DEFAULT_PROFILE:
            return self.default
        for candidate in self.profiles:
            if candidate.name == profile:
                return candidate.budgets
        raise KeyError(profile)


_ABSENT = object()
_MAX_RESOLVED = 1024
_NEVER = re.compile(r"(?!)")  # matches no name: a profile's ``when`` that the resource rules out


def _key_of(value: object) -> object:
    """A resource value as a cache key: itself when hashable, else its type and text."""
    try:
        hash(value)
    except TypeError:
        return (type(value), repr(value))
    return (type(value), value)


def _resolve(config: BudgetConfig, resource: Mapping[str, object]) -> BudgetConfig:
    """``config`` with every rule resolved for ``resource`` (see :meth:`BudgetConfig.for_resource`)."""

    def kept(rules: tuple[MatchRule, ...]) -> tuple[MatchRule, ...]:
        return tuple(found for rule in rules if (found := rule.resolved(resource)) is not None)

    stages = tuple(
        stage if (rules := kept(stage.rules)) == stage.rules else replace(stage, rules=rules) for stage in config.stages
    )
    profiles = tuple(
        replace(profile, when=profile.when.resolved(resource) or MatchRule(name=_NEVER)) for profile in config.profiles
    )
    requests = kept(config.requests) if config.requests is not None else None
    return BudgetConfig(config.source, stages, config.default, profiles, requests, every_root=config.every_root)
