"""Turn a budget file into a validated :class:`BudgetConfig`, or a precise error."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, NoReturn, TypeVar

from opentelemetry.trace import SpanKind

from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.errors import describe_value as _describe
from latency_budget._config.genai_defaults import (
    BUILTIN_STAGES,
    DEFAULT_FIRST_TOKEN,
    DEFAULT_PARALLELIZABLE,
    DEFAULT_PROTECTED,
    builtin_rules,
)
from latency_budget._config.limits import MAX_PROFILES, MAX_RULES, MAX_STAGES
from latency_budget._config.matching import Conditions, GlobError, MatchRule, compile_glob, exact_values
from latency_budget._config.model import (
    DEFAULT_MIN_SAVING_MS,
    DEFAULT_PROFILE,
    DEFAULT_QUALITY,
    BudgetConfig,
    BudgetSet,
    EvaluationRule,
    FirstTokenSource,
    Profile,
    QualityPolicy,
    Severity,
    StageBudget,
    StageDefinition,
    TimeUnit,
)
from latency_budget._config.yaml_source import (
    LocatedDict,
    LocatedList,
    decode_budget_text,
    parse_yaml,
    read_budget_file,
)

__all__ = ["RESERVED_STAGE_NAMES", "load_budgets"]

SUPPORTED_VERSIONS = (1,)
RESERVED_STAGE_NAMES = frozenset({"total", "unattributed"})
_STAGE_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_KINDS = {kind.name.lower(): kind for kind in SpanKind}
_UNITS: tuple[TimeUnit, ...] = ("s", "ms", "us", "ns", "iso8601")

_TOP_KEYS = (
    "version",
    "requests",
    "total_ms",
    "first_token_ms",
    "severity",
    "objective",
    "total_objective",
    "first_token_objective",
    "hints",
    "tools",
    "quality",
    "stages",
    "profiles",
)
_STAGE_KEYS = (
    "builtin",
    "budget_ms",
    "first_token_ms",
    "max_calls",
    "severity",
    "objective",
    "match",
    "first_token",
    "parallelizable",
    "protected",
)
_OVERRIDE_KEYS = ("budget_ms", "first_token_ms", "max_calls", "severity", "objective", "parallelizable")
_PROFILE_KEYS = (
    "name",
    "when",
    "total_ms",
    "first_token_ms",
    "severity",
    "total_objective",
    "first_token_objective",
    "hints",
    "stages",
)
# An objective: a percentage above 0 and below 100, with at most 6 decimals ("99%", "99.95%").
# budgets.schema.json has the same pattern.
_OBJECTIVE = re.compile(r"(?!0(?:\.0*)?%)(?:[1-9]?[0-9])(?:\.[0-9]{1,6})?%\Z")
_RULE_KEYS = ("name", "attributes", "exists", "kind", "scope", "resource", "unless")
_FIRST_TOKEN_KEYS = ("attributes", "events")
_HINTS_KEYS = ("min_saving_ms",)
# Problems listed before the loader stops looking: enough for any real file, bounded for a hostile one.
MAX_PROBLEMS = 50

_T = TypeVar("_T")

_TOOLS_KEYS = ("side_effects",)
_QUALITY_KEYS = ("evaluations", "max_drop", "significance")
_EVALUATION_KEYS = ("higher_is_better", "max_drop")


def load_budgets(
    path: str | os.PathLike[str] | None = None, *, text: str | None = None, source: str | None = None
) -> BudgetConfig:
    """Load and validate a budget file from ``path``, or YAML ``text``.

    Raises :class:`BudgetConfigError` naming the file, the line and the key path of
    every problem found (up to ``MAX_PROBLEMS``; ``problems`` lists them, the message has
    a line for each). ``source`` names the text in messages.
    """
    if (path is None) == (text is None):
        raise TypeError("load_budgets() takes a path or text=..., not both")
    if path is not None:
        name = os.fspath(path)
        text = decode_budget_text(read_budget_file(name, name).data, name)
        source = source or name
    assert text is not None
    return _Builder(source or "<text>").build(parse_yaml(text, source or "<text>"))


def as_config(budgets: BudgetConfig | str | os.PathLike[str]) -> BudgetConfig:
    """``budgets`` itself when already loaded, else the budget file it names, loaded."""
    return budgets if isinstance(budgets, BudgetConfig) else load_budgets(budgets)


class _Skip(Exception):
    """A problem was recorded: the value being built is left out, and loading goes on to the next."""


class _Builder:
    """Builds the config, recording every problem and skipping the part it spoils, then raising them all."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.rule_count = 0
        self.problems: list[BudgetConfigError] = []

    # -- error helpers ---------------------------------------------------------------

    def fail(self, line: int | None, path: str, message: str) -> NoReturn:
        self.note(line, path, message)
        raise _Skip

    def note(self, line: int | None, path: str, message: str) -> None:
        """Record a problem and go on (at ``MAX_PROBLEMS``, stop with all of them)."""
        self.problems.append(BudgetConfigError(self.source, line, path, message))
        if len(self.problems) >= MAX_PROBLEMS:
            raise BudgetConfigError.combined(self.problems)

    def attempt(self, build: Callable[[], _T], fallback: _T) -> _T:
        """``build()``, or ``fallback`` when it recorded a problem."""
        try:
            return build()
        except _Skip:
            return fallback

    def check_keys(self, mapping: LocatedDict, allowed: Iterable[str], path: str) -> None:
        """Record each unknown key (with the closest known one); the known keys are still read."""
        allowed = tuple(allowed)
        for key, line in mapping.key_lines.items():
            if key not in allowed:
                self.note(line, _join(path, key), f"unknown key{_did_you_mean(key, allowed, 'expected one of')}")

    def mapping(self, value: Any, line: int | None, path: str) -> LocatedDict:
        if not isinstance(value, LocatedDict):
            self.fail(line, path, f"expected a mapping, got {_describe(value)}")
        return value

    def positive_number(self, value: Any, line: int | None, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            self.fail(line, path, f"expected a positive number, got {_describe(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            number = math.inf
        if not math.isfinite(number):
            self.fail(line, path, f"expected a positive, finite number, got {_describe(value)}")
        return number

    def non_negative_number(self, value: Any, line: int | None, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            self.fail(line, path, f"expected a number of 0 or more, got {_describe(value)}")
        try:
            return float(value)
        except OverflowError:  # an integer too large for a float
            self.fail(line, path, f"expected a finite number of 0 or more, got {_describe(value)}")

    def positive_int(self, value: Any, line: int | None, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.fail(line, path, f"expected a positive whole number, got {_describe(value)}")
        return value

    def boolean(self, value: Any, line: int | None, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(line, path, f"expected true or false, got {_describe(value)}")
        return value

    def severity(self, value: Any, line: int | None, path: str) -> Severity:
        if value == "warn":
            return "warn"
        if value == "error":
            return "error"
        self.fail(line, path, f"expected 'warn' or 'error', got {_describe(value)}")

    def objective(self, value: Any, line: int | None, path: str) -> float:
        """A percentage such as ``'99.9%'``, as the fraction 0.999."""
        if not isinstance(value, str) or not _OBJECTIVE.match(value):
            self.fail(
                line,
                path,
                "expected a percentage above 0% and below 100% (at most 6 decimals) such as '99%' or '99.9%',"
                f" got {_describe(value)}",
            )
        return float(Decimal(value[:-1]) / 100)

    def optional_objective(self, mapping: LocatedDict, key: str, path: str, default: float | None) -> float | None:
        if key not in mapping:
            return default
        return self.objective(mapping[key], mapping.key_lines[key], _join(path, key))

    def string(self, value: Any, line: int | None, path: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(line, path, f"expected a non-empty string, got {_describe(value)}")
        return value

    def string_list(self, value: Any, line: int | None, path: str) -> list[tuple[str, int | None]]:
        if isinstance(value, str):
            return [(self.string(value, line, path), line)]
        if not isinstance(value, LocatedList) or not value:
            self.fail(line, path, f"expected a string or a non-empty list of strings, got {_describe(value)}")
        return [
            (self.string(item, item_line, f"{path}[{i}]"), item_line)
            for i, (item, item_line) in enumerate(zip(value, value.item_lines, strict=True))
        ]

    # -- document --------------------------------------------------------------------

    def build(self, document: Any) -> BudgetConfig:
        try:
            config = self.document(document)
        except _Skip:
            config = None
        if self.problems or config is None:
            raise BudgetConfigError.combined(self.problems)
        return config

    def document(self, document: Any) -> BudgetConfig:
        if document is None:
            self.fail(None, "", "the budget file is empty (expected at least 'version: 1')")
        doc = self.mapping(document, 1, "")
        self.check_keys(doc, _TOP_KEYS, "")
        if "version" not in doc:
            self.fail(doc.line, "version", "missing (expected 'version: 1')")
        version = doc["version"]
        if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
            self.fail(doc.key_lines["version"], "version", f"unsupported version {_describe(version)}; expected 1")

        objective = self.attempt(lambda: self.optional_objective(doc, "objective", "", None), None)
        definitions, default_stages = self.stages(doc, objective)
        total_ms = self.attempt(lambda: self.optional_number(doc, "total_ms", ""), None)
        first_token_ms = self.attempt(lambda: self.optional_number(doc, "first_token_ms", ""), None)
        severity: Severity = "error"
        if "severity" in doc:
            severity = self.attempt(
                lambda: self.severity(doc["severity"], doc.key_lines["severity"], "severity"), "error"
            )
        default = BudgetSet(
            profile=DEFAULT_PROFILE,
            stages=default_stages,
            total_ms=total_ms if total_ms is not None else _sum_budgets(default_stages),
            first_token_ms=first_token_ms,
            severity=severity,
            total_objective=self.attempt(lambda: self.optional_objective(doc, "total_objective", "", objective), None),
            first_token_objective=self.attempt(
                lambda: self.optional_objective(doc, "first_token_objective", "", objective), None
            ),
            min_saving_ms=self.attempt(lambda: self.hints(doc, "", DEFAULT_MIN_SAVING_MS), DEFAULT_MIN_SAVING_MS),
            side_effects=self.attempt(lambda: self.side_effects(doc), ()),
            quality=self.attempt(lambda: self.quality(doc), DEFAULT_QUALITY),
        )
        profiles = self.profiles(doc, default)
        requests = None
        every_root = doc.get("requests") == "all"  # every local root is a request, start-up work included
        if "requests" in doc and not every_root:
            if isinstance(doc["requests"], str):
                self.note(
                    doc.key_lines["requests"],
                    "requests",
                    f"expected all, a rule or a list of rules, got {doc['requests']!r}",
                )
            else:
                requests = self.attempt(
                    lambda: self.rules(doc["requests"], doc.key_lines["requests"], "requests"), None
                )
        if self.problems:
            raise _Skip
        return BudgetConfig(
            source=self.source,
            stages=definitions,
            default=default,
            profiles=profiles,
            requests=requests,
            every_root=every_root,
        )

    def hints(self, mapping: LocatedDict, path: str, inherited: float) -> float:
        """The least saving a hint must offer, from ``hints: {min_saving_ms: ...}``, else ``inherited``."""
        if "hints" not in mapping:
            return inherited
        where = _join(path, "hints")
        spec = self.mapping(mapping["hints"], mapping.key_lines["hints"], where)
        self.check_keys(spec, _HINTS_KEYS, where)
        if "min_saving_ms" not in spec:
            return inherited
        return self.non_negative_number(
            spec["min_saving_ms"], spec.key_lines["min_saving_ms"], f"{where}.min_saving_ms"
        )

    def side_effects(self, doc: LocatedDict) -> tuple[re.Pattern[str], ...]:
        """The tools that change something, from ``tools: {side_effects: [glob, ...]}``: none by default."""
        if "tools" not in doc:
            return ()
        spec = self.mapping(doc["tools"], doc.key_lines["tools"], "tools")
        self.check_keys(spec, _TOOLS_KEYS, "tools")
        if "side_effects" not in spec:
            return ()
        line = spec.key_lines["side_effects"]
        names = self.string_list(spec["side_effects"], line, "tools.side_effects")
        return tuple(
            self.glob(name, item_line or line, f"tools.side_effects[{i}]") for i, (name, item_line) in enumerate(names)
        )

    def quality(self, doc: LocatedDict) -> QualityPolicy:
        """What levers that change answers weigh their savings against, from ``quality:``; the defaults without it."""
        if "quality" not in doc:
            return DEFAULT_QUALITY
        spec = self.mapping(doc["quality"], doc.key_lines["quality"], "quality")
        self.check_keys(spec, _QUALITY_KEYS, "quality")
        max_drop = DEFAULT_QUALITY.max_drop
        if "max_drop" in spec:
            max_drop = self.attempt(
                lambda: self.drop(spec["max_drop"], spec.key_lines["max_drop"], "quality.max_drop"), max_drop
            )
        significance = DEFAULT_QUALITY.significance
        if "significance" in spec:
            value, line = spec["significance"], spec.key_lines["significance"]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 0.5:
                self.note(
                    line,
                    "quality.significance",
                    f"expected a level above 0 and at most 0.5 (such as 0.05), got {_describe(value)}",
                )
            else:
                significance = float(value)
        evaluations = None
        if "evaluations" in spec:
            evaluations = self.attempt(
                lambda: self.evaluations(spec["evaluations"], spec.key_lines["evaluations"]), None
            )
        return QualityPolicy(evaluations, max_drop, significance)

    def drop(self, value: Any, line: int, path: str) -> float:
        """A tolerated drop: a number of 0 or more, at most 1 (scores and rates are compared on their own scale)."""
        drop = self.non_negative_number(value, line, path)
        if drop > 1:
            self.fail(line, path, f"expected a drop of 0 to 1 (absolute, on the score's scale), got {_describe(value)}")
        return drop

    def evaluations(self, value: Any, line: int) -> tuple[EvaluationRule, ...]:
        """``quality.evaluations``: a list of globs, or a mapping of glob -> {higher_is_better, max_drop}."""
        path = "quality.evaluations"
        if not isinstance(value, LocatedDict):
            return tuple(
                EvaluationRule(name, self.glob(name, item_line or line, f"{path}[{i}]"))
                for i, (name, item_line) in enumerate(self.string_list(value, line, path))
            )
        if not value:
            self.fail(line, path, "expected at least one evaluation name or glob")
        rules: list[EvaluationRule] = []
        for name, body in value.items():
            where, key_line = f"{path}.{name}", value.key_lines[name]

            def one(name: str = name, body: Any = body, where: str = where, key_line: int = key_line) -> None:
                pattern = self.glob(name, key_line, where)
                entry = self.mapping(body, key_line, where)
                self.check_keys(entry, _EVALUATION_KEYS, where)
                higher = True
                if "higher_is_better" in entry:
                    higher = self.boolean(
                        entry["higher_is_better"], entry.key_lines["higher_is_better"], f"{where}.higher_is_better"
                    )
                drop = None
                if "max_drop" in entry:
                    drop = self.drop(entry["max_drop"], entry.key_lines["max_drop"], f"{where}.max_drop")
                rules.append(EvaluationRule(name, pattern, higher, drop))

            self.attempt(one, None)
        return tuple(rules)

    def optional_number(self, mapping: LocatedDict, key: str, path: str) -> float | None:
        if key not in mapping:
            return None
        return self.positive_number(mapping[key], mapping.key_lines[key], _join(path, key))

    # -- stages ----------------------------------------------------------------------

    def stages(
        self, doc: LocatedDict, objective: float | None
    ) -> tuple[tuple[StageDefinition, ...], tuple[StageBudget, ...]]:
        if "stages" not in doc:
            # No stages: track the GenAI stages with the built-in matchers, judge nothing per stage.
            definitions = tuple(
                StageDefinition(name, builtin_rules(name) or (), DEFAULT_FIRST_TOKEN, builtin=True)
                for name in BUILTIN_STAGES
            )
            budgets = tuple(_default_stage(name, objective) for name in BUILTIN_STAGES)
            return definitions, budgets
        stages = self.mapping(doc["stages"], doc.key_lines["stages"], "stages")
        if not stages:
            self.fail(stages.line, "stages", "expected at least one stage")
        if len(stages) > MAX_STAGES:
            self.fail(stages.line, "stages", f"more than {MAX_STAGES} stages ({len(stages)})")
        definitions_list: list[StageDefinition] = []
        budgets_list: list[StageBudget] = []
        for name, body in stages.items():
            line = stages.key_lines[name]
            path = f"stages.{name}"

            def one(name: str = name, body: Any = body, line: int = line, path: str = path) -> None:
                if name in RESERVED_STAGE_NAMES:
                    self.fail(line, path, f"'{name}' is a reserved name; choose another stage name")
                if not _STAGE_NAME.match(name):
                    self.fail(line, path, "stage names must match [a-z][a-z0-9_]* (lowercase, digits, underscores)")
                spec = self.mapping(body, line, path)
                self.check_keys(spec, _STAGE_KEYS, path)
                base = _default_stage(name, objective)
                budget = self.stage_budget(name, spec, base, path)
                definitions_list.append(self.stage_definition(name, spec, line, path))
                budgets_list.append(budget)

            self.attempt(one, None)
        return tuple(definitions_list), tuple(budgets_list)

    def stage_definition(self, name: str, spec: LocatedDict, line: int, path: str) -> StageDefinition:
        """The stage's rules: its own ``match``, then the built-in ones unless ``builtin: false``."""
        builtin = builtin_rules(name)
        keep_builtin = builtin is not None
        if "builtin" in spec:
            bline = spec.key_lines["builtin"]
            keep_builtin = self.boolean(spec["builtin"], bline, f"{path}.builtin")
            if builtin is None:
                known = _did_you_mean(name, BUILTIN_STAGES, "the built-in stages are")
                self.fail(bline, f"{path}.builtin", f"'{name}' has no built-in rules{known}")
        own: tuple[MatchRule, ...] = ()
        if "match" in spec:
            own = self.rules(spec["match"], spec.key_lines["match"], f"{path}.match")
        elif not keep_builtin:
            if builtin is None:
                self.fail(
                    line,
                    path,
                    f"no 'match' rules; only the built-in stages ({', '.join(BUILTIN_STAGES)}) may omit them"
                    + _did_you_mean(name, BUILTIN_STAGES, "", quiet=True),
                )
            self.fail(spec.key_lines["builtin"], f"{path}.builtin", "false leaves the stage no rules; add 'match'")
        added = tuple(rule for rule in builtin or () if rule not in own) if keep_builtin else ()
        first_token = DEFAULT_FIRST_TOKEN
        if "first_token" in spec:
            first_token = (
                self.first_token(spec["first_token"], spec.key_lines["first_token"], f"{path}.first_token")
                + DEFAULT_FIRST_TOKEN
            )
        return StageDefinition(name, own + added, first_token, builtin=keep_builtin)

    def stage_budget(self, name: str, spec: LocatedDict, base: StageBudget, path: str) -> StageBudget:
        def get(key: str) -> tuple[Any, int]:
            return spec[key], spec.key_lines[key]

        budget_ms = base.budget_ms
        if "budget_ms" in spec:
            budget_ms = self.attempt(lambda: self.positive_number(*get("budget_ms"), f"{path}.budget_ms"), None)
        first_token_ms = base.first_token_ms
        if "first_token_ms" in spec:
            first_token_ms = self.attempt(
                lambda: self.positive_number(*get("first_token_ms"), f"{path}.first_token_ms"), None
            )
        max_calls = base.max_calls
        if "max_calls" in spec:
            max_calls = self.attempt(lambda: self.positive_int(*get("max_calls"), f"{path}.max_calls"), None)
        severity = base.severity
        if "severity" in spec:
            severity = self.attempt(lambda: self.severity(*get("severity"), f"{path}.severity"), severity)
        parallelizable = base.parallelizable
        if "parallelizable" in spec:
            parallelizable = self.attempt(
                lambda: self.boolean(*get("parallelizable"), f"{path}.parallelizable"), parallelizable
            )
        objective = self.attempt(lambda: self.optional_objective(spec, "objective", path, base.objective), None)
        protected = base.protected
        if "protected" in spec:  # not a profile's to change (not in _OVERRIDE_KEYS): what the stage's work is
            protected = self.attempt(lambda: self.boolean(*get("protected"), f"{path}.protected"), protected)
        return StageBudget(name, budget_ms, first_token_ms, max_calls, severity, parallelizable, objective, protected)

    # -- match rules -----------------------------------------------------------------

    def rules(self, value: Any, line: int, path: str) -> tuple[MatchRule, ...]:
        if isinstance(value, LocatedDict):
            return (self.rule(value, path),)
        if not isinstance(value, LocatedList) or not value:
            self.fail(line, path, f"expected a rule or a non-empty list of rules, got {_describe(value)}")
        rules = [
            self.attempt(
                lambda item=item, item_line=item_line, i=i: self.rule(  # type: ignore[misc]
                    self.mapping(item, item_line, f"{path}[{i}]"), f"{path}[{i}]"
                ),
                None,
            )
            for i, (item, item_line) in enumerate(zip(value, value.item_lines, strict=True))
        ]
        if None in rules:
            raise _Skip  # recorded; the stage is left out rather than judged by some of its rules
        return tuple(rule for rule in rules if rule is not None)

    def rule(self, spec: LocatedDict, path: str) -> MatchRule:
        self.rule_count += 1
        if self.rule_count > MAX_RULES:
            self.fail(spec.line, path, f"more than {MAX_RULES} match rules in the file")
        self.check_keys(spec, _RULE_KEYS, path)
        if not spec:
            self.fail(
                spec.line, path, f"an empty rule would match every span; use at least one of {', '.join(_RULE_KEYS)}"
            )
        name = scope = None
        if "name" in spec:
            name = self.glob(spec["name"], spec.key_lines["name"], f"{path}.name")
        if "scope" in spec:
            scope = self.glob(spec["scope"], spec.key_lines["scope"], f"{path}.scope")
        kind = None
        if "kind" in spec:
            raw, kline = spec["kind"], spec.key_lines["kind"]
            kind = _KINDS.get(raw.lower()) if isinstance(raw, str) else None
            if kind is None:
                self.fail(kline, f"{path}.kind", f"expected one of {', '.join(_KINDS)}, got {_describe(raw)}")
        exists: tuple[str, ...] = ()
        if "exists" in spec:
            exists = tuple(
                key for key, _ in self.string_list(spec["exists"], spec.key_lines["exists"], f"{path}.exists")
            )
        attributes = self.conditions(spec, "attributes", path)
        unless = self.conditions(spec, "unless", path)
        if unless and not (attributes or exists):
            self.fail(
                spec.key_lines["unless"], f"{path}.unless", "needs 'attributes' or 'exists' beside it in the rule"
            )
        return MatchRule(
            name=name,
            attributes=attributes,
            exists=exists,
            kind=kind,
            scope=scope,
            resource=self.conditions(spec, "resource", path),
            unless=unless,
        )

    def conditions(self, spec: LocatedDict, section: str, path: str) -> Conditions:
        """A rule's ``attributes``, ``resource`` or ``unless``: key -> a value or a list of allowed values."""
        if section not in spec:
            return ()
        found: list[tuple[str, frozenset[tuple[type, object]]]] = []
        attrs = self.mapping(spec[section], spec.key_lines[section], f"{path}.{section}")
        if not attrs:
            self.fail(attrs.line, f"{path}.{section}", "expected at least one attribute")
        for key, allowed in attrs.items():
            key_path, key_line = f"{path}.{section}.{key}", attrs.key_lines[key]
            values = list(allowed) if isinstance(allowed, LocatedList) else [allowed]
            if not values:
                self.fail(key_line, key_path, "expected a value or a non-empty list of values")
            if not key:
                self.fail(key_line, key_path, "an empty attribute key never matches: spans cannot carry one")
            for value in values:
                if value is None or isinstance(value, (LocatedDict, LocatedList)):
                    self.fail(key_line, key_path, f"expected strings, numbers or booleans, got {_describe(value)}")
                if isinstance(value, float) and math.isnan(value):
                    self.fail(key_line, key_path, "NaN never matches (NaN equals no value, itself included)")
            found.append((key, exact_values(values)))
        return tuple(found)

    def glob(self, value: Any, line: int, path: str) -> re.Pattern[str]:
        pattern = self.string(value, line, path)
        try:
            return compile_glob(pattern)
        except GlobError as exc:
            self.fail(line, path, f"invalid glob: {exc}")

    def first_token(self, value: Any, line: int, path: str) -> tuple[FirstTokenSource, ...]:
        spec = self.mapping(value, line, path)
        self.check_keys(spec, _FIRST_TOKEN_KEYS, path)
        sources: list[FirstTokenSource] = []
        if "attributes" in spec:
            attrs = self.mapping(spec["attributes"], spec.key_lines["attributes"], f"{path}.attributes")
            for key, unit in attrs.items():
                if unit not in _UNITS:
                    self.fail(
                        attrs.key_lines[key],
                        f"{path}.attributes.{key}",
                        f"expected a unit ({', '.join(_UNITS)}), got {_describe(unit)}",
                    )
                sources.append(FirstTokenSource(attribute=key, unit=unit))
        if "events" in spec:
            for event, _ in self.string_list(spec["events"], spec.key_lines["events"], f"{path}.events"):
                sources.append(FirstTokenSource(event=event))
        if not sources:
            self.fail(spec.line, path, "expected 'attributes' or 'events'")
        return tuple(sources)

    # -- profiles --------------------------------------------------------------------

    def profiles(self, doc: LocatedDict, default: BudgetSet) -> tuple[Profile, ...]:
        if "profiles" not in doc:
            return ()
        items = doc["profiles"]
        if not isinstance(items, LocatedList):
            self.fail(doc.key_lines["profiles"], "profiles", f"expected a list of profiles, got {_describe(items)}")
        if len(items) > MAX_PROFILES:
            self.fail(items.line, "profiles", f"more than {MAX_PROFILES} profiles ({len(items)})")
        names: dict[str, int] = {}
        profiles: list[Profile] = []
        for i, (item, item_line) in enumerate(zip(items, items.item_lines, strict=True)):
            found = self.attempt(
                lambda i=i, item=item, item_line=item_line: self.profile(  # type: ignore[misc]
                    i, item, item_line, names, default
                ),
                None,
            )
            if found is not None:
                profiles.append(found)
        return tuple(profiles)

    def profile(self, i: int, item: Any, item_line: int, names: dict[str, int], default: BudgetSet) -> Profile:
        """``profiles[i]``; ``names`` holds the line of each profile name seen so far."""
        path = f"profiles[{i}]"
        spec = self.mapping(item, item_line, path)
        self.check_keys(spec, _PROFILE_KEYS, path)
        for required in ("name", "when"):
            if required not in spec:
                self.fail(spec.line, f"{path}.{required}", "missing")
        name = self.string(spec["name"], spec.key_lines["name"], f"{path}.name")
        if name == DEFAULT_PROFILE or not _PROFILE_NAME.match(name):
            self.fail(
                spec.key_lines["name"],
                f"{path}.name",
                f"invalid profile name {name!r} (letters, digits, '_', '.', '-'; not 'default')",
            )
        if name in names:
            self.fail(
                spec.key_lines["name"],
                f"{path}.name",
                f"duplicate profile '{name}' (first defined on line {names[name]})",
            )
        names[name] = spec.key_lines["name"]
        when = self.rule(self.mapping(spec["when"], spec.key_lines["when"], f"{path}.when"), f"{path}.when")
        stages = list(default.stages)
        if "stages" in spec:
            overrides = self.mapping(spec["stages"], spec.key_lines["stages"], f"{path}.stages")
            index = {budget.name: n for n, budget in enumerate(stages)}
            for stage, body in overrides.items():
                sline, spath = overrides.key_lines[stage], f"{path}.stages.{stage}"
                if stage not in index:
                    suffix = _did_you_mean(stage, list(index), "stages are")
                    self.note(sline, spath, f"profile overrides unknown stage '{stage}'{suffix}")
                    continue

                def override_one(stage: str = stage, body: Any = body, sline: int = sline, spath: str = spath) -> None:
                    override = self.mapping(body, sline, spath)
                    self.check_keys(override, _OVERRIDE_KEYS, spath)
                    stages[index[stage]] = self.stage_budget(stage, override, stages[index[stage]], spath)

                self.attempt(override_one, None)
        effective = tuple(stages)
        total_ms = self.optional_number(spec, "total_ms", path)
        first_token_ms = self.optional_number(spec, "first_token_ms", path)
        severity = default.severity
        if "severity" in spec:
            severity = self.severity(spec["severity"], spec.key_lines["severity"], f"{path}.severity")
        budgets = BudgetSet(
            profile=name,
            stages=effective,
            total_ms=total_ms if total_ms is not None else _sum_budgets(effective),
            first_token_ms=first_token_ms if first_token_ms is not None else default.first_token_ms,
            severity=severity,
            total_objective=self.optional_objective(spec, "total_objective", path, default.total_objective),
            first_token_objective=self.optional_objective(
                spec, "first_token_objective", path, default.first_token_objective
            ),
            min_saving_ms=self.hints(spec, path, default.min_saving_ms),
            side_effects=default.side_effects,
            quality=default.quality,
        )
        return Profile(name=name, when=when, budgets=budgets)


def _sum_budgets(stages: tuple[StageBudget, ...]) -> float | None:
    budgets = [stage.budget_ms for stage in stages if stage.budget_ms is not None]
    return sum(budgets) if budgets else None


def _did_you_mean(name: str, known: Iterable[str], listing: str, *, quiet: bool = False) -> str:
    """``; did you mean 'x'?`` for the closest of ``known`` (difflib), else ``; LISTING: a, b`` (nothing if quiet)."""
    known = tuple(known)
    hint = difflib.get_close_matches(name, known, n=1)
    if hint:
        return f"; did you mean '{hint[0]}'?"
    return "" if quiet or not known else f"; {listing}: {', '.join(known)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _default_stage(name: str, objective: float | None) -> StageBudget:
    """A stage's budget before its file's keys: parallelizable and protected as the built-in defaults say."""
    return StageBudget(
        name,
        None,
        parallelizable=name in DEFAULT_PARALLELIZABLE,
        objective=objective,
        protected=name in DEFAULT_PROTECTED,
    )
