"""``latency-budget doctor TRACES``: what the budget file misses in recorded traces, and the YAML that fixes it.

Three kinds of finding, each with the budget-file text that would fix it:

- spans that look like AI calls (by name, kind, or keys that mention a model, tokens, a
  prompt, a tool or a retriever) but are in no stage: the ``match`` rule that stages them;
- stage spans that look like bookkeeping (under a millisecond, with a placeholder name or
  value): the stage's rules with an ``unless`` that leaves them out;
- attributes and events that look like a time to first token but are not read: the
  stage's ``first_token`` setting, with the unit the values fit.

Held to the truth of what it proposes: no rule is drawn from a local root (a request is
no call) or from a span the dialect table calls no call (``NOT_CALLS``, a dialect's
``not_stages``); a name rule's stage is guessed from the part of the name the rule keeps;
one rule goes into one stage only; and each fix is applied to the budget file and the
recording judged again (``judge_roots``, as ``check`` does) before it is printed: it is
kept only when it changes its own stage's counts (or first tokens) and no other stage's,
stages no local root and no span the table calls no call.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.trace import SpanKind

from latency_budget._config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget._config.genai_defaults import DIALECTS, NOT_CALLS, builtin_rules, looks_like_a_call
from latency_budget._config.matching import MatchRule, compile_glob, vetoed
from latency_budget._core.first_token import parse_instant_ns
from latency_budget._core.trace_state import is_local_root
from latency_budget._encode import terminal_text
from latency_budget._replay import SpanRecord, judge_roots

from ._common import EXIT_INTERNAL, CliError, example_epilog, raw_help
from ._output import emit
from ._recorded import add_budgets_argument, add_trace_arguments, load_config, load_traces
from ._summary import plural

__all__ = ["Finding", "diagnose", "register"]

_DESCRIPTION = """\
Find what the budget file misses in recorded traces, and print the YAML that fixes it.

Lists spans that look like AI calls but landed in no stage (by name, kind, and keys that
mention a model, tokens, a prompt, a tool or a retriever), stage spans that look like
bookkeeping (under a millisecond, with a placeholder name or value), and attributes or
events that look like a time to first token but are not read. For each it prints the
`match` rule, `unless` veto or `first_token` setting that would fix it, as budget-file
YAML (checked with the loader). Exit status 1 when it found something."""

# Words that say what a call is, looked for in a span's name, in its type-like attribute
# values and in its attribute keys, in that order; the first stage found wins.
_STAGE_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tool_calls", ("tool", "function_call")),
    ("retrieval", ("retriev", "embed", "rerank", "vector", "search")),
    ("model_call", ("llm", "chat", "generat", "completion", "predict", "invoke_model", "model")),
)
_AI_KEY_WORDS = ("model", "token", "prompt", "tool", "retriev", "embedding", "completion", "llm")
# Names and values of containers: they hold calls, they are not calls.
_CONTAINER_WORDS = ("agent", "workflow", "pipeline", "chain", "crew", "task", "graph", "session", "run_stream")
_PLACEHOLDER = re.compile(r"^[(<\[{].*[)>\]}]$|placeholder|dummy|merged|noop|\bn/a\b|unknown", re.IGNORECASE)
_FIRST_TOKEN_KEY = re.compile(r"first[._ ]?(token|chunk)|ttft|completion_start", re.IGNORECASE)
_TYPE_KEY = re.compile(r"(^|[._])(type|kind|operation(\.name)?)$")
_BOOKKEEPING_NS = 1_000_000  # under a millisecond
_UNITS_NS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))


@dataclass
class Finding:
    """One thing the budget file misses: what was seen, on how many spans, and the YAML that fixes it."""

    kind: str  # "unstaged", "bookkeeping" or "first_token"
    stage: str
    what: str  # a short description of the spans
    spans: int
    example: str  # the first span's name
    fix: dict[str, Any] = field(default_factory=dict)  # a budget-file fragment (stages: {...})


def register(commands: Any) -> None:
    """Add the ``doctor`` subcommand."""
    parser = commands.add_parser(
        "doctor",
        help="find AI spans in no stage, bookkeeping in a stage and unread first tokens, with the YAML that fixes them",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget doctor traces.jsonl",
            "latency-budget doctor traces.jsonl --budgets budgets.yaml",
        ),
        formatter_class=raw_help(),
    )
    add_trace_arguments(parser, streamed=False)  # it holds every span
    add_budgets_argument(parser, required=False)
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose the traces; 0 when nothing is missed, 1 when something is."""
    config, label = load_config(args.budgets)
    traces = load_traces(args)
    base = yaml.safe_load(Path(args.budgets).read_text(encoding="utf-8")) if args.budgets else None
    findings = diagnose(config, traces.spans, base=base)
    fix = merged_fix(findings, keep=config.stage_names)
    if fix:
        try:  # what is printed must be a valid budget file fragment
            load_budgets(text=yaml.safe_dump({"version": 1, **fix}, sort_keys=False), source="<doctor>")
        except BudgetConfigError as exc:
            raise CliError(
                f"internal error (please report it): doctor wrote an invalid rule: {exc}", EXIT_INTERNAL
            ) from exc
    if args.format == "json":
        emit(
            json.dumps(
                {
                    "findings": [
                        {"kind": f.kind, "stage": f.stage, "what": f.what, "spans": f.spans, "example": f.example}
                        for f in findings
                    ],
                    "fix": fix,
                },
                indent=2,  # ASCII: every non-ASCII and control character escaped (docs/reliability.md)
            )
            + "\n"
        )
    else:
        emit(_text(findings, fix, label, len(traces.spans)))
    return 1 if findings else 0


def diagnose(
    config: BudgetConfig, spans: Sequence[SpanRecord], *, base: Mapping[str, Any] | None = None
) -> list[Finding]:
    """Every finding in ``spans`` under ``config`` whose fix holds on the recording, unstaged AI spans first.

    ``base`` is the budget file ``config`` was loaded from, as a YAML document (the
    built-in ``version: 1`` when None): each fix is applied to it and the recording
    judged again before the finding is kept (see the module's docstring).
    """
    unstaged: dict[tuple[str, str, str], list[SpanRecord]] = {}  # (stage, rule kind, signature) -> spans
    bookkeeping: dict[tuple[int, str, str], list[SpanRecord]] = {}  # (stage, key, value) -> spans
    first_tokens: dict[tuple[int, str, str], list[SpanRecord]] = {}  # (stage, attribute or event, unit) -> spans
    classifier = config.classifier
    vetoing = {rule for stage in config.stages for rule in stage.rules if rule.unless or rule.scoped_unless}
    present = {(span.trace_id, span.span_id) for span in spans}
    for span in spans:
        stage = classifier.classify(span.name, span.kind, span.scope, span.attributes)
        if stage < 0:
            if any(vetoed(rule.for_scope(span.scope).unless, span.attributes) for rule in vetoing):
                continue  # left out on purpose by a rule's unless: bookkeeping, not a call
            recorded = span.parent_id is not None and (span.trace_id, span.parent_id) in present
            if is_local_root(span.parent_id, span.remote_parent, recorded) or _not_a_call(span):
                continue  # a request, or what the dialect table calls no call: never a rule's model
            guessed = _unstaged(span)
            if guessed is not None:
                unstaged.setdefault(guessed, []).append(span)
            continue
        veto = _bookkeeping(span)
        if veto is not None:
            bookkeeping.setdefault((stage, *veto), []).append(span)
        for found in _unread_first_tokens(config, stage, span):
            first_tokens.setdefault((stage, *found), []).append(span)
    findings = [_unstaged_finding(config, key, found) for key, found in _one_stage_per_rule(unstaged).items()]
    findings += [_bookkeeping_finding(config, key, found) for key, found in bookkeeping.items()]
    findings += [_first_token_finding(config, key, found) for key, found in first_tokens.items()]
    return _held_to_the_recording(config, findings, spans, {"version": 1} if base is None else base)


def _not_a_call(span: SpanRecord) -> bool:
    """Whether the dialect table calls the span no call (``NOT_CALLS``, on its scope, a key's absence included)."""
    if _known_container(span.attributes):
        return True
    for entry in NOT_CALLS:
        if entry.scope is not None and not compile_glob(entry.scope).fullmatch(span.scope):
            continue
        value = span.attributes.get(entry.key)
        if value in entry.values if isinstance(value, str) or value is None else False:
            return True
    return False


def _one_stage_per_rule(
    unstaged: Mapping[tuple[str, str, str], list[SpanRecord]],
) -> dict[tuple[str, str, str], list[SpanRecord]]:
    """The groups of unstaged spans, one stage per rule: where one rule was guessed for two stages, the larger group's.

    A rule matches every span of both groups whichever stage it is put in: put in two, the
    first stage of the file would take them all.
    """
    by_rule: dict[tuple[str, str], list[tuple[str, list[SpanRecord]]]] = {}
    for (stage, how, value), found in unstaged.items():
        by_rule.setdefault((how, value), []).append((stage, found))
    order = [stage for stage, _ in _STAGE_WORDS]
    kept: dict[tuple[str, str, str], list[SpanRecord]] = {}
    for (how, value), groups in by_rule.items():
        stage, _ = max(groups, key=lambda group: (len(group[1]), -order.index(group[0])))
        kept[(stage, how, value)] = [span for _, found in groups for span in found]
    return kept


# -- held to the recording ---------------------------------------------------------------------------------------

# Per judged root (by span id): its stage counts, its stages' worst first tokens, whether the root is a stage span.
_Judged = dict[tuple[int, int], tuple[dict[str, int], dict[str, float | None], bool]]


def _judge(config: BudgetConfig, spans: Sequence[SpanRecord]) -> tuple[_Judged, int]:
    """The recording judged as ``check`` judges it; and how many spans the table calls no call are staged."""
    judged: _Judged = {}
    for found in judge_roots(config, spans):
        report = found.report
        counts = {s.stage: s.count for s in report.stages}
        tokens = {s.stage: s.first_token_ms for s in report.stages}
        judged[(found.root.trace_id, found.root.span_id)] = (counts, tokens, found.stage >= 0)
    classifier = config.classifier
    staged_no_calls = sum(
        1
        for span in spans
        if _not_a_call(span) and classifier.classify(span.name, span.kind, span.scope, span.attributes) >= 0
    )
    return judged, staged_no_calls


def _applied(base: Mapping[str, Any], fix: Mapping[str, Any], keep: Sequence[str]) -> BudgetConfig | None:
    """``base`` with ``fix``'s stages merged in (each stage's keys replaced), loaded; None if it does not load.

    A base with no ``stages:`` tracks the stages in ``keep`` (the built-in ones): they are
    listed, so that adding one stage does not drop the others (as :func:`merged_fix` does).
    """
    document = copy.deepcopy(dict(base))
    stages = document.get("stages")
    if not isinstance(stages, dict):
        stages = document["stages"] = {name: {} for name in keep}
    for stage, spec in fix.get("stages", {}).items():
        current = stages.get(stage)
        stages[stage] = {**(current if isinstance(current, dict) else {}), **spec}
    try:
        return load_budgets(text=yaml.safe_dump(document, sort_keys=False), source="<doctor>")
    except BudgetConfigError:
        return None


def _held_to_the_recording(
    config: BudgetConfig, findings: list[Finding], spans: Sequence[SpanRecord], base: Mapping[str, Any]
) -> list[Finding]:
    """The findings whose fix, applied alone, changes its stage and only it, and stages no root and no non-call."""
    if not findings:
        return findings
    before, staged_before = _judge(config, spans)
    kept: list[Finding] = []
    for proposed in findings:
        if not proposed.fix:  # advice in words only (a stage with rules of its own): nothing to apply
            kept.append(proposed)
            continue
        finding: Finding | None = proposed
        fixed = _applied(base, proposed.fix, config.stage_names)
        if fixed is None:
            continue
        after, staged_after = _judge(fixed, spans)
        if staged_after > staged_before and proposed.kind == "unstaged":
            # It would stage a span the dialect table calls no call: narrow the rule by the
            # table's own reasons (a key that must be there, values that veto), once.
            finding = _narrowed(proposed, config, fixed, spans)
            fixed = _applied(base, finding.fix, config.stage_names) if finding is not None else None
            if finding is None or fixed is None:
                continue
            after, staged_after = _judge(fixed, spans)
        if staged_after <= staged_before and finding is not None and _changes_only(finding, before, after):
            kept.append(finding)
    return kept


def _narrowed(
    finding: Finding, config: BudgetConfig, fixed: BudgetConfig, spans: Sequence[SpanRecord]
) -> Finding | None:
    """The finding with its added rule narrowed to leave out the no-call spans it staged; None if it cannot be."""
    exists: list[str] = []
    unless: dict[str, list[str]] = {}
    for span in spans:
        if not _not_a_call(span) or config.classifier.classify(span.name, span.kind, span.scope, span.attributes) >= 0:
            continue
        if fixed.classifier.classify(span.name, span.kind, span.scope, span.attributes) < 0:
            continue
        attributes = span.attributes
        reasons: list[tuple[str, tuple[str | None, ...]]] = [
            (entry.key, entry.values)
            for entry in NOT_CALLS
            if entry.scope is None or compile_glob(entry.scope).fullmatch(span.scope)
        ]
        reasons += [(dialect.key, dialect.not_stages) for dialect in DIALECTS]
        for key, values in reasons:
            value = attributes.get(key)
            if value is None and None in values and key not in exists:
                exists.append(key)
            elif isinstance(value, str) and value in values and value not in unless.setdefault(key, []):
                unless[key].append(value)
    if not exists and not any(unless.values()):
        return None
    fix = copy.deepcopy(finding.fix)
    rule = fix["stages"][finding.stage]["match"][-1]  # the rule the finding adds is the last
    if exists:
        rule["exists"] = [*rule.get("exists", []), *exists]
    for key, vetoes in unless.items():
        if vetoes:
            rule.setdefault("unless", {}).setdefault(key, []).extend(vetoes)
    what = finding.what + ", leaving out what the dialect table calls no call"
    return Finding(finding.kind, finding.stage, what, finding.spans, finding.example, fix)


def _changes_only(finding: Finding, before: _Judged, after: _Judged) -> bool:
    """Whether ``after`` differs from ``before`` in the finding's stage (counts, or first tokens) and nowhere else."""
    stage = finding.stage
    changed = False
    for root, (counts, tokens, root_staged) in after.items():
        old_counts, old_tokens, old_root_staged = before.get(root, ({}, {}, False))
        if root_staged and not old_root_staged:
            return False  # a request made a call
        for name in counts.keys() | old_counts.keys():
            if counts.get(name, 0) != old_counts.get(name, 0):
                if name != stage:
                    return False  # it breaks another stage
                changed = True
        if finding.kind == "first_token" and tokens.get(stage) != old_tokens.get(stage):
            changed = True
    return changed


# -- AI calls in no stage ----------------------------------------------------------------------------------------


def _unstaged(span: SpanRecord) -> tuple[str, str, str] | None:
    """(stage, "attribute KEY" or "name", value) for a span in no stage that looks like an AI call; None if not."""
    attributes = span.attributes
    keys = [key for key in attributes if not key.startswith("latency_budget.")]
    ai_keys = [key for key in keys if any(word in key.lower() for word in _AI_KEY_WORDS)]
    typed = [(key, value) for key, value in attributes.items() if isinstance(value, str) and _TYPE_KEY.search(key)]
    texts = [span.name.lower(), *(value.lower() for _, value in typed)]
    if not (ai_keys or looks_like_a_call(attributes) or _guess(texts) is not None):
        return None
    if _known_container(attributes):
        return None
    stage = _guess(texts) or _guess([key.lower() for key in ai_keys])
    if stage is None or (span.kind is SpanKind.SERVER and not ai_keys):
        return None
    # The most specific signature: a type-like attribute whose value names the call, else the name.
    for key, value in typed:
        if _guess([value.lower()]) == stage and not _is_container(value):
            return stage, f"attribute {key}", value
    if _is_container(_last_segment(span.name)):
        return None
    glob = _name_glob(span.name)
    if glob != span.name:
        # The rule keeps only the name's first word: its stage is what that word (or the
        # keys) says, not the variable rest (`tools/call search_docs` is a tool call).
        kept = glob[:-2]
        stage = _guess([kept.lower()]) or _guess([key.lower() for key in ai_keys]) or stage
    return stage, "name", glob


def _guess(texts: Iterable[str]) -> str | None:
    for text in texts:
        last = _last_segment(text)
        for stage, words in _STAGE_WORDS:
            if any(word in last for word in words):
                return stage
    for text in texts:
        if _is_container(text):
            continue
        for stage, words in _STAGE_WORDS:
            if any(word in text for word in words):
                return stage
    return None


def _last_segment(text: str) -> str:
    return re.split(r"[.:/ ]", text.strip().lower())[-1] if text.strip() else ""


def _is_container(text: str) -> bool:
    lower = text.lower()
    return any(word in lower for word in _CONTAINER_WORDS)


def _known_container(attributes: Mapping[str, object]) -> bool:
    for dialect in DIALECTS:
        value = attributes.get(dialect.key)
        if isinstance(value, str) and value in dialect.not_stages:
            return True
    for entry in NOT_CALLS:
        value = attributes.get(entry.key)
        if isinstance(value, str) and value in entry.values:
            return True
    return False


def _unstaged_finding(config: BudgetConfig, key: tuple[str, str, str], spans: list[SpanRecord]) -> Finding:
    stage, how, value = key
    if how == "name":
        rule: dict[str, Any] = {"name": value}
        what = f"spans named like {value!r}"
    else:
        attribute = how.split(" ", 1)[1]
        rule = {"attributes": {attribute: [value]}}
        what = f"spans with {attribute}={value!r}"
    return Finding("unstaged", stage, what, len(spans), spans[0].name, _stage_fix(config, stage, [rule]))


def _name_glob(name: str) -> str:
    """A glob for spans named like ``name``: ``tool weather`` -> ``tool *`` (the rest is usually a variable part)."""
    first, space, _ = name.partition(" ")
    escaped = re.sub(r"([*?\[])", r"[\1]", first)
    return f"{escaped} *" if space and first else escaped


# -- bookkeeping in a stage --------------------------------------------------------------------------------------


def _bookkeeping(span: SpanRecord) -> tuple[str, str] | None:
    """(key, placeholder value) of a sub-millisecond stage span with a placeholder value; None if it is no such span."""
    if span.end_ns - span.start_ns >= _BOOKKEEPING_NS:
        return None
    for key, value in span.attributes.items():
        if isinstance(value, str) and not key.startswith("latency_budget.") and _PLACEHOLDER.search(value):
            return key, value
    return None


def _bookkeeping_finding(config: BudgetConfig, key: tuple[int, str, str], spans: list[SpanRecord]) -> Finding:
    stage_index, attribute, value = key
    stage = config.stages[stage_index].name
    rules = _builtin_yaml(config, stage)
    what = f"{stage} spans under 1 ms with {attribute}={value!r}"
    if not rules:  # the stage's own rules (their globs are not kept): say what to add to each
        what += f"; add `unless: {{{attribute}: [{value!r}]}}` to each of its match rules"
        return Finding("bookkeeping", stage, what, len(spans), spans[0].name)
    for rule in rules:
        rule.setdefault("unless", {}).setdefault(attribute, []).append(value)
    return Finding("bookkeeping", stage, what, len(spans), spans[0].name, {"stages": {stage: {"match": rules}}})


# -- first tokens not read ---------------------------------------------------------------------------------------


def _unread_first_tokens(config: BudgetConfig, stage: int, span: SpanRecord) -> list[tuple[str, str]]:
    """(attribute or "event NAME", unit) of what looks like a first token on a stage span but is not read."""
    sources = config.stages[stage].first_token
    read_keys = {s.attribute for s in sources if s.attribute is not None and s.scope in (None, span.scope)}
    read_events = {s.event for s in sources if s.event is not None}
    found: list[tuple[str, str]] = []
    duration_ns = max(0, span.end_ns - span.start_ns)
    for key, value in span.attributes.items():
        if key in read_keys or key.startswith("latency_budget.") or not _FIRST_TOKEN_KEY.search(key):
            continue
        unit = _unit_of(value, duration_ns)
        if unit is not None:
            found.append((key, unit))
    for event in span.events:
        name = event.name
        if name not in read_events and _FIRST_TOKEN_KEY.search(name):
            found.append((f"event {name}", "event"))
    return found


def _unit_of(value: object, duration_ns: int) -> str | None:
    """The coarsest unit in which ``value`` is a time within the span, or iso8601 for an instant; None if neither."""
    if isinstance(value, str):
        return "iso8601" if parse_instant_ns(value) is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    for unit, scale in _UNITS_NS:
        if value * scale <= duration_ns:
            return unit
    return None


def _first_token_finding(config: BudgetConfig, key: tuple[int, str, str], spans: list[SpanRecord]) -> Finding:
    stage_index, source, unit = key
    stage = config.stages[stage_index].name
    if unit == "event":
        event = source.split(" ", 1)[1]
        setting: dict[str, Any] = {"events": [event]}
        what = f"{stage} spans with an event {event!r} not read as the first token"
    else:
        setting = {"attributes": {source: unit}}
        what = f"{stage} spans with {source} (in {unit}, by its values) not read as the first token"
    return Finding("first_token", stage, what, len(spans), spans[0].name, {"stages": {stage: {"first_token": setting}}})


# -- the fix as YAML ---------------------------------------------------------------------------------------------


def _stage_fix(config: BudgetConfig, stage: str, added: list[dict[str, Any]]) -> dict[str, Any]:
    """``stages: {stage: {match: [...]}}``: the built-in rules written out (a match replaces them), then ``added``.

    A stage with match rules of its own keeps them: ``added`` is what to append.
    """
    return {"stages": {stage: {"match": [*_builtin_yaml(config, stage), *added]}}}


def _builtin_yaml(config: BudgetConfig, stage: str) -> list[dict[str, Any]]:
    """The stage's rules as YAML when they are the built-in ones (no match of its own), else nothing."""
    index = config.stage_index.get(stage)
    builtin = builtin_rules(stage)
    if builtin is None or (index is not None and config.stages[index].rules != builtin):
        return []
    # A rule on a URL, a value's ending or a span-name pattern (the general conventions' rows)
    # has no budget-file spelling: it is left out of what is written.
    return [_rule_yaml(rule) for rule in builtin if rule.probe is None and rule.name is None]


def _rule_yaml(rule: MatchRule) -> dict[str, Any]:
    """A built-in MatchRule written back as budget-file YAML (attribute conditions and vetoes only)."""
    out: dict[str, Any] = {}
    if rule.attributes:
        out["attributes"] = {key: _values(allowed) for key, allowed in rule.attributes}
    if rule.exists:
        out["exists"] = list(rule.exists)
    if rule.unless:
        out["unless"] = {key: _values(allowed) for key, allowed in rule.unless}
    return out


def _values(allowed: Iterable[tuple[type, object]]) -> list[object]:
    return sorted((value for _, value in allowed), key=repr)


def merged_fix(findings: Sequence[Finding], keep: Sequence[str] = ()) -> dict[str, Any]:
    """Every finding's fix in one budget-file fragment: per stage, match rules and first-token settings merged.

    The stages named in ``keep`` (the file's) are listed too, as ``{}`` when nothing changes
    for them: a file with no ``stages:`` key tracks the three built-in stages, and adding a
    ``stages:`` with only the fixed ones would drop the others.
    """
    if not findings:
        return {}
    stages: dict[str, dict[str, Any]] = {name: {} for name in keep}
    for finding in findings:
        for stage, spec in finding.fix.get("stages", {}).items():
            merged = stages.setdefault(stage, {})
            if "match" in spec:
                rules = merged.setdefault("match", [])
                for rule in spec["match"]:
                    _add_rule(rules, rule)
            if "first_token" in spec:
                setting = merged.setdefault("first_token", {})
                for part, value in spec["first_token"].items():
                    if part == "events":
                        setting.setdefault("events", [])
                        setting["events"] += [v for v in value if v not in setting["events"]]
                    else:
                        setting.setdefault("attributes", {}).update(value)
    return {"stages": stages} if stages else {}


def _add_rule(rules: list[dict[str, Any]], rule: dict[str, Any]) -> None:
    """Add ``rule``, or merge its vetoes into an equal rule already there."""
    bare = {k: v for k, v in rule.items() if k != "unless"}
    for existing in rules:
        if {k: v for k, v in existing.items() if k != "unless"} == bare:
            for key, values in rule.get("unless", {}).items():
                kept = existing.setdefault("unless", {}).setdefault(key, [])
                kept += [v for v in values if v not in kept]
            return
    rules.append(json.loads(json.dumps(rule)))


def _text(findings: Sequence[Finding], fix: Mapping[str, Any], label: str, span_count: int) -> str:
    if not findings:
        return f"Nothing missed in {plural(span_count, 'span')} under {label}.\n"
    titles = {
        "unstaged": "Look like AI calls, in no stage",
        "bookkeeping": "In a stage, look like bookkeeping",
        "first_token": "Look like a first token, not read",
    }
    lines = [f"{plural(len(findings), 'finding')} in {plural(span_count, 'span')} under {label}:"]
    for kind, title in titles.items():
        of_kind = [f for f in findings if f.kind == kind]
        if not of_kind:
            continue
        lines += ["", f"{title}:"]
        for finding in of_kind:
            lines.append(
                f"  {finding.stage}: {plural(finding.spans, 'span')}, {finding.what} (e.g. {finding.example!r})"
            )
    counts = Counter(f.stage for f in findings)
    lines += [
        "",
        f"Add to the budget file (stages {', '.join(sorted(counts))}; a stage's match replaces its built-in rules,",
        "so they are written out in full):",
        "",
    ]
    # Names from the traces are shown as terminal text; the YAML escapes every non-ASCII
    # character itself (a double-quoted scalar), so it stays valid and reads back exactly.
    text = [terminal_text(line) for line in lines]
    text.append(yaml.safe_dump(dict(fix), sort_keys=False, allow_unicode=False, width=1000).rstrip())
    return "\n".join(text) + "\n"
