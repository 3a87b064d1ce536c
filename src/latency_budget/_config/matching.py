"""Compiled match rules and the stage classifier used on the hot path.

Rules are compiled once, when the budget file loads. Classifying a span is then a
cached lookup on (scope, name, kind) followed by a few dictionary reads for the rules
that look at attributes.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from opentelemetry.trace import SpanKind

__all__ = [
    "ABSENT",
    "MAX_CACHED_NAME",
    "AttributeDecision",
    "GlobError",
    "MatchRule",
    "Probe",
    "StageClassifier",
    "UrlMatch",
    "ValueEndings",
    "compile_glob",
    "exact_values",
]

_MISSING = object()


class GlobError(ValueError):
    """A glob pattern that cannot be compiled (for example an unclosed ``[``)."""


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a shell-style glob (``*``, ``?``, ``[abc]``, ``[!abc]``), case-sensitively.

    Unlike :mod:`fnmatch`, an unclosed ``[`` is an error rather than a literal, because
    in a budget file it is almost always a typo.
    """
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                raise GlobError(f"unclosed '[' at position {i} in glob {pattern!r}")
            i = j + 1
        else:
            i += 1
    return re.compile(fnmatch.translate(pattern))


def exact_values(values: Sequence[object]) -> frozenset[tuple[type, object]]:
    """The allowed values of an attribute condition, keyed by exact type.

    ``True == 1`` in Python, so the type is part of the key: a rule that allows ``1``
    does not match ``True``, and ``"1"`` never matches ``b"1"``.
    """
    return frozenset((type(v), v) for v in values)


# Attribute conditions: (key, its allowed values as exact_values gives them).
Conditions = tuple[tuple[str, frozenset[tuple[type, object]]], ...]


class Probe(Protocol):
    """A condition that reads a few keys in a way an exact value cannot say (a URL, a name's ending)."""

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys it reads: a span with none of them never satisfies it."""
        ...

    def holds(self, attributes: Mapping[str, object]) -> bool:
        """Whether ``attributes`` satisfy it (values of the wrong type never do)."""
        ...


@dataclass(frozen=True, slots=True)
class ValueEndings:
    """A string value of ``key`` that ends with one of ``endings`` (a framework's class-name conventions)."""

    key: str
    endings: tuple[str, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,)

    def holds(self, attributes: Mapping[str, object]) -> bool:
        value = attributes.get(self.key)
        return value.__class__ is str and value.endswith(self.endings)


@dataclass(frozen=True, slots=True)
class UrlMatch:
    """A condition on the URL an HTTP client span calls: a POST to one of ``routes``.

    The URL is read from the first of ``keys`` the span carries (``url.full``, or the older
    ``http.url``), the method from ``method_keys``. A route is a host and the path endings
    that hold there: an exact host (``api.openai.com``), a host glob (``*.openai.azure.com``)
    or ``*`` (any host). The query and fragment are not part of the path. Exact hosts cost
    one dictionary probe; globs are tried in order; both are compiled once.
    """

    routes: tuple[tuple[str, tuple[str, ...]], ...]
    keys: tuple[str, ...] = ("url.full", "http.url")
    method_keys: tuple[str, ...] = ("http.request.method", "http.method")
    by_host: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    globbed: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_host: dict[str, tuple[str, ...]] = {}
        globbed: list[tuple[re.Pattern[str], tuple[str, ...]]] = []
        for host, endings in self.routes:
            if any(c in host for c in "*?["):
                globbed.append((compile_glob(host), endings))
            else:
                by_host[host] = by_host.get(host, ()) + endings
        object.__setattr__(self, "by_host", by_host)
        object.__setattr__(self, "globbed", tuple(globbed))

    def holds(self, attributes: Mapping[str, object]) -> bool:
        """Whether the span POSTs to one of the routes (values of the wrong type never match)."""
        for key in self.method_keys:
            method = attributes.get(key)
            if method is not None:
                if method != "POST":
                    return False
                break
        else:
            return False
        for key in self.keys:
            url = attributes.get(key)
            if url is not None:
                break
        else:
            return False
        if url.__class__ is not str:
            return False
        _, separator, rest = url.partition("://")
        if not separator:
            return False
        slash = rest.find("/")
        if slash < 0:
            return False
        host = rest[:slash].rpartition("@")[2]
        # An IPv6 literal keeps its brackets (never a named provider, still a route of any host).
        host = host[: host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
        path = rest[slash:]
        for mark in ("?", "#"):
            cut = path.find(mark)
            if cut >= 0:
                path = path[:cut]
        endings = self.by_host.get(host.lower())
        if endings is not None and path.endswith(endings):
            return True
        for pattern, endings in self.globbed:
            if pattern.match(host.lower()) is not None and path.endswith(endings):
                return True
        return False


@dataclass(frozen=True, slots=True)
class MatchRule:
    """One rule: every condition that is set must hold."""

    name: re.Pattern[str] | None = None
    attributes: Conditions = ()
    exists: tuple[str, ...] = ()
    kind: SpanKind | None = None
    scope: re.Pattern[str] | None = None
    # Conditions that veto the rule: a span with one of these values is not matched,
    # whatever else holds (the built-in rules' "not a call", see genai_defaults.NOT_CALLS).
    unless: Conditions = ()
    # Vetoes for the spans of one instrumentation scope only: (scope pattern, conditions), an
    # allowed value ``None`` standing for the key's absence (OpenTelemetry attributes are never
    # None). They are settled once per scope, by :meth:`for_scope`, when the classifier first
    # meets a (scope, name, kind): spans of other scopes never look at them.
    scoped_unless: tuple[tuple[re.Pattern[str], Conditions], ...] = ()
    # Conditions on the resource of the process that made the span (``service.name``).
    # They are settled once per resource, by :meth:`resolved`; a rule that still has them
    # has not been resolved and matches nothing.
    resource: Conditions = ()
    # A condition no exact value can say (the built-in rules only): the URL an HTTP client
    # span calls (UrlMatch), or how a value ends (ValueEndings).
    probe: Probe | None = None

    def __post_init__(self) -> None:
        if (self.unless or self.scoped_unless) and not self.needs_attributes:
            raise ValueError("a rule's vetoes (unless) need an attribute condition beside them")

    @property
    def needs_attributes(self) -> bool:
        """Whether the rule's outcome depends on the span's attributes."""
        return bool(self.attributes or self.exists or self.probe is not None)

    @property
    def gate(self) -> tuple[str, ...]:
        """Keys one of which a span must carry for the rule to match (only for a rule that needs attributes)."""
        if self.exists:
            return self.exists[:1]
        if self.attributes:
            return (self.attributes[0][0],)
        return self.probe.keys if self.probe is not None else ()

    def resolved(self, resource: Mapping[str, object]) -> MatchRule | None:
        """The rule for spans of ``resource``: without its resource conditions when they hold, else None."""
        if not self.resource:
            return self
        if not _holds(self.resource, resource):
            return None
        return replace(self, resource=())

    def for_scope(self, scope: str) -> MatchRule:
        """The rule for spans of ``scope``: its scoped vetoes that apply there joined to ``unless``.

        The rule itself when none applies (the usual case), so rules stay shared.
        """
        if not self.scoped_unless:
            return self
        extra = tuple(
            condition for pattern, conditions in self.scoped_unless if pattern.match(scope) for condition in conditions
        )
        return replace(self, unless=self.unless + extra, scoped_unless=()) if extra else self

    def matches_static(self, name: str, kind: SpanKind, scope: str) -> bool:
        """The part of the rule that depends only on name, kind and scope."""
        if self.resource:  # not resolved for a resource (see resolved): it matches nothing
            return False
        if self.kind is not None and kind is not self.kind:
            return False
        if self.name is not None and self.name.match(name) is None:
            return False
        return self.scope is None or self.scope.match(scope) is not None

    def matches_attributes(self, attributes: Mapping[str, object]) -> bool:
        """The part of the rule that depends on attributes (exact, type included)."""
        for key in self.exists:
            if key not in attributes:
                return False
        if self.attributes and not _holds(self.attributes, attributes):
            return False
        if self.probe is not None and not self.probe.holds(attributes):
            return False
        return not self.unless or not vetoed(self.unless, attributes)

    def matches(self, name: str, kind: SpanKind, scope: str, attributes: Mapping[str, object]) -> bool:
        """Whether a span with these properties satisfies the rule."""
        if not self.matches_static(name, kind, scope):
            return False
        return self.for_scope(scope).matches_attributes(attributes)


def _holds(conditions: Conditions, attributes: Mapping[str, object]) -> bool:
    """Whether ``attributes`` hold every one of ``conditions`` (exact values, type included)."""
    for key, allowed in conditions:
        value = attributes.get(key, _MISSING)
        if value is _MISSING:
            return False
        try:
            if (type(value), value) not in allowed:
                return False
        except TypeError:  # unhashable values never match
            return False
    return True


ABSENT = (type(None), None)
"""The allowed value (as :func:`exact_values` gives it) of a veto on a key's absence."""


def vetoed(unless: Conditions, attributes: Mapping[str, object]) -> bool:
    """Whether ``attributes`` hold one of the ``unless`` values of a rule (``None``: the key is absent)."""
    for key, values in unless:
        value = attributes.get(key, _MISSING)
        if value is _MISSING:
            if ABSENT in values:
                return True
            continue
        try:
            if (type(value), value) in values:
                return True
        except TypeError:  # unhashable values are no veto
            continue
    return False


class AttributeDecision:
    """Candidate rules that still need the span's attributes, compiled for speed.

    Every candidate requires at least one key, so a span that has none of them (most
    spans) is settled by one set operation in C. When every candidate is a single
    attribute condition (the usual GenAI case), the answer is then one dictionary probe
    per distinct key: the earliest stage whose allowed values contain the span's value.
    Otherwise the rules are tried in order. A stage found through the index whose rules
    carry vetoes (``unless``) is checked against them; a vetoed answer is settled by
    trying the rules in order, so a later rule can still match. Rules with a probe (the
    built-in URL and class-name rows) sit beside the index: tried, in order, only on a span
    that carries a key they read, and only when they would give an earlier stage than the index did.
    """

    __slots__ = ("by_probe", "gate", "index", "keys", "rules", "veto_keys", "vetoes")

    def __init__(self, rules: tuple[tuple[int, MatchRule], ...]) -> None:
        self.rules = rules
        by_probe = tuple((stage, rule) for stage, rule in rules if rule.probe is not None)
        # A veto on a key's absence cannot be gated on the keys present: those rules are tried in order.
        simple = all(
            (
                len(rule.attributes) == 1
                and not rule.exists
                and rule.probe is None
                and not any(ABSENT in values for _, values in rule.unless)
            )
            or (rule.probe is not None and not rule.attributes and not rule.exists and not rule.unless)
            for _, rule in rules
        )
        # stage -> the vetoes its rules share (a stage whose rules differ in them: no index).
        shared: dict[int, Conditions] = {}
        for stage, rule in rules:
            if rule.probe is None and shared.setdefault(stage, rule.unless) != rule.unless:
                simple = False
        # The probe rules beside the index (with no index, every rule is tried in order), each
        # with the keys it reads: one that reads none of the keys present is not called.
        self.by_probe: tuple[tuple[int, MatchRule, frozenset[str]], ...] = (
            tuple((stage, rule, frozenset(rule.gate)) for stage, rule in by_probe) if simple else ()
        )
        self.vetoes: dict[int, Conditions] | None = {stage: u for stage, u in shared.items() if u} or None
        # The keys of every veto: a span with none of them (nearly all) is checked by one set operation.
        self.veto_keys = frozenset(key for u in (self.vetoes or {}).values() for key, _ in u)
        # key -> (its value, typed -> the first stage allowing it)
        self.index: dict[str, dict[tuple[type, object], int]] | None = None
        if simple:
            by_key: dict[str, dict[tuple[type, object], int]] = {}
            for stage, rule in rules:
                if rule.probe is not None:
                    continue
                key, allowed = rule.attributes[0]
                table = by_key.setdefault(key, {})
                for value in allowed:
                    table.setdefault(value, stage)  # rules are in order: keep the first stage
            self.index = by_key
        # Every rule requires at least one key; if none of these is present, nothing matches.
        self.gate: frozenset[str] | None = frozenset(key for _, rule in rules for key in rule.gate)
        # What the index reads of a span: its keys and the vetoes', found in one set operation.
        self.keys = self.gate | self.veto_keys

    def decide(self, attributes: Mapping[str, object]) -> int:
        """Index of the first candidate's stage that these attributes satisfy, or -1."""
        index = self.index
        if index is None:
            if self.gate is not None and self.gate.isdisjoint(attributes):
                return -1
            for stage, rule in self.rules:
                if rule.matches_attributes(attributes):
                    return stage
            return -1
        # The index and veto keys the span carries (usually one or two), in one pass over
        # its attributes in C, instead of a probe per key of the dialect table (eight) and
        # two more passes for the gate and the vetoes: under callgrind, about 2,000
        # instructions less per stage span.
        present = self.keys.intersection(attributes)
        best = -1
        for key in present:  # the earliest stage wins, whatever the order
            table = index.get(key)
            if table is None:  # a veto key only
                continue
            value = attributes[key]
            try:
                stage = table.get((type(value), value), -1)
            except TypeError:  # unhashable values never match
                continue
            if stage >= 0 and (best < 0 or stage < best):
                best = stage
        if self.by_probe:
            for stage, rule, reads in self.by_probe:  # in stage order: the first that holds is the earliest
                if best >= 0 and stage >= best:
                    break
                if not reads.isdisjoint(present) and rule.probe.holds(attributes):  # type: ignore[union-attr]
                    return stage  # a probe rule carries no vetoes
        if (
            best >= 0
            and self.vetoes is not None
            and (unless := self.vetoes.get(best))
            and not self.veto_keys.isdisjoint(present)
            and vetoed(unless, attributes)
        ):
            for stage, rule in self.rules:  # rare: settle it rule by rule
                if rule.matches_attributes(attributes):
                    return stage
            return -1
        return best


MAX_CACHED_NAME = 256
"""Span names and scope names longer than this (characters) are classified every time, never cached."""


class StageClassifier:
    """Maps a span to the index of the first stage whose rules match, or -1.

    Decisions that do not depend on attributes are cached per (scope, name, kind).
    The cache is bounded in entries and in bytes: once full it stops growing, and a
    name or scope longer than ``MAX_CACHED_NAME`` characters is never cached; both fall
    back to evaluating the (still precompiled) rules. Entries with the same candidate
    rules share one decision object. So high-cardinality or huge span names cannot
    exhaust memory: the cache holds at most ``max_cache`` keys of bounded size.
    """

    __slots__ = ("_by_name", "_cache", "_decisions", "_max_cache", "_rules", "late_gate")

    def __init__(self, rules: Sequence[tuple[int, MatchRule]], *, max_cache: int = 4096) -> None:
        self._rules = tuple(rules)
        # One decision object per distinct set of candidate rules (by position in _rules).
        self._decisions: dict[tuple[tuple[int, ...], tuple[int, ...]], AttributeDecision] = {}
        # For a span that was not labelled at start: when every rule needs an attribute,
        # a span with none of the keys they require matches nothing, whatever its name.
        # None when some rule matches on name, kind or scope alone (then classify).
        self.late_gate: frozenset[str] | None = None
        if all(rule.needs_attributes for _, rule in self._rules):
            self.late_gate = frozenset(key for _, rule in self._rules for key in rule.gate)
        # Keyed by id(kind): SpanKind members are singletons, and hashing an Enum member
        # runs Python code, which costs more than the rest of the lookup.
        self._cache: dict[tuple[str, str, int], int | AttributeDecision] = {}
        self._max_cache = max_cache
        # The hot path's first try: span name -> (scope, kind, decision) of the first
        # entry cached for that name. A string's hash is cached, a tuple's is not, and
        # a name almost always comes with one scope and kind.
        self._by_name: dict[str, tuple[str, SpanKind, int | AttributeDecision]] = {}

    def _decision(self, name: str, kind: SpanKind, scope: str) -> int | AttributeDecision:
        found: list[int] = []
        rules = self._rules
        for position, (stage, rule) in enumerate(rules):
            if rule.matches_static(name, kind, scope):
                if not rule.needs_attributes:
                    if not found:
                        return stage
                    # An unconditional rule after conditional ones: later rules can never win.
                    found.append(position)
                    return self._shared(tuple(found), scope, ordered=True)
                found.append(position)
        return self._shared(tuple(found), scope, ordered=False) if found else -1

    def _shared(self, positions: tuple[int, ...], scope: str, *, ordered: bool) -> AttributeDecision:
        candidates = tuple((stage, rule.for_scope(scope)) for stage, rule in (self._rules[p] for p in positions))
        # ``ordered`` follows from the positions (the last rule is unconditional); a scoped veto
        # that applied makes a candidate another rule, so the positions of those are the key too.
        key = (
            positions,
            tuple(p for p, (_, rule) in zip(positions, candidates, strict=True) if rule is not self._rules[p][1]),
        )
        decision = self._decisions.get(key)
        if decision is None:
            decision = _Ordered(candidates) if ordered else AttributeDecision(candidates)
            if len(self._decisions) < self._max_cache:
                self._decisions[key] = decision
        return decision

    def prepare(self, name: str, kind: SpanKind, scope: str) -> int | AttributeDecision:
        """What name, kind and scope decide: a stage index (or -1), or the attribute rules left."""
        key = (scope, name, id(kind))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._decision(name, kind, scope)
            # Only on a miss: the cost of a cached lookup stays what it was.
            if len(self._cache) < self._max_cache and len(name) <= MAX_CACHED_NAME and len(scope) <= MAX_CACHED_NAME:
                self._cache[key] = entry
                self._by_name.setdefault(name, (scope, kind, entry))
        return entry

    def classify(self, name: str, kind: SpanKind, scope: str, attributes: Mapping[str, object]) -> int:
        """Index of the matching stage in config order, or -1 for no stage.

        This runs at the start and end of every span, so the common cases (a cached
        decision, a span with none of the keys the rules look at) are inlined.
        """
        hit = self._by_name.get(name)
        entry = hit[2] if hit is not None and hit[1] is kind and hit[0] == scope else self.prepare(name, kind, scope)
        if entry.__class__ is int:
            return entry
        gate = entry.gate  # type: ignore[union-attr]
        if gate is not None and gate.isdisjoint(attributes):
            return -1
        return entry.decide(attributes)  # type: ignore[union-attr]


class _Ordered(AttributeDecision):
    """Candidates ending in an unconditional rule: tried in order, the last always holds."""

    __slots__ = ()

    def __init__(self, rules: tuple[tuple[int, MatchRule], ...]) -> None:
        self.rules = rules
        self.index = None
        self.by_probe = ()
        self.gate = None  # the last rule holds whatever the attributes
        self.vetoes = None  # decide() below tries each rule whole, vetoes included
        self.veto_keys = frozenset()
        self.keys = frozenset()

    def decide(self, attributes: Mapping[str, object]) -> int:
        for stage, rule in self.rules:
            if rule.matches_attributes(attributes):
                return stage
        return -1  # not reached: the last rule always holds
