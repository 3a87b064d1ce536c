"""Prometheus recording and alerting rules from a budget file's objectives.

Every budget a request is judged against (a stage's budgets, ``total_ms``,
``first_token_ms``) gets recording rules for the share of requests that broke it, from
the ``latency_budget.requests`` counter as the repository's ``collector-config.yaml``
exports it to Prometheus. Every budget with an objective gets multi-window,
multi-burn-rate alerts, as in The Site Reliability Workbook (chapter 5, "Alerting on
SLOs"): an alert fires while both its long and its short window burn the error budget
(``1 - objective``) at least ``rate`` times as fast as the objective allows.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from latency_budget._attributes import PROFILE, STAGE, VIOLATED, WARNED
from latency_budget._config import BudgetConfig, BudgetSet
from latency_budget._config.model import StageBudget
from latency_budget._core.report import TOTAL, format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import promql_string, shell_word, template_text, yaml_comment, yaml_scalar
from latency_budget._version import __version__

__all__ = [
    "ALERT_NAME",
    "BURN_RATE_RECORD",
    "DEFAULT_MAX_RULES",
    "DEFAULT_PERIOD",
    "ERROR_BUDGET_RECORD",
    "OBJECTIVE_RECORD",
    "RATIO_RECORD",
    "REMAINING_RECORD",
    "REQUESTS_METRIC",
    "ROW_LABEL",
    "WORKBOOK_BURN_RATES",
    "BurnRate",
    "TooManyRules",
    "parse_burn_rate",
    "ratio_record",
    "rules_bound",
    "rules_document",
]

# latency_budget.requests (a counter) as the Collector's Prometheus exporter names it: dots
# become underscores, a counter gets _total, a unit in braces is dropped.
REQUESTS_METRIC = "latency_budget_requests_total"
STAGE_LABEL = "latency_budget_stage"
KIND_LABEL = "latency_budget_kind"
PROFILE_LABEL = "latency_budget_profile"
WITHIN_LABEL = "latency_budget_within_budget"
# A resource label collector-config.yaml adds to every series (resource_constant_labels).
SERVICE_LABEL = "service_name"
GROUP_BY = (SERVICE_LABEL, STAGE_LABEL, KIND_LABEL, PROFILE_LABEL)

RATIO_RECORD = "latency_budget:requests_over_budget:ratio_rate"  # + the window, e.g. ..._rate5m
OBJECTIVE_RECORD = "latency_budget:objective:ratio"
# Error-budget metadata, as SLO tooling records it: the budget (1 - objective), the burn rate
# over the SLO period (the period's ratio over the budget) and the share of the budget left.
ERROR_BUDGET_RECORD = "latency_budget:error_budget:ratio"
BURN_RATE_RECORD = "latency_budget:period_burn_rate:ratio"
REMAINING_RECORD = "latency_budget:period_error_budget_remaining:ratio"
PERIOD_LABEL = "latency_budget_period"
# Tells the burn-rate rows apart: two rows may share a severity and a long window.
ROW_LABEL = "latency_budget_burn_rate"
ALERT_NAME = "LatencyBudgetBurnRate"
DEFAULT_PERIOD = "30d"
# Stages (with total and first token) x (profiles + 1) x burn-rate rows: about the alerts written.
DEFAULT_MAX_RULES = 5000
# Prometheus durations are int64 nanoseconds: about 106,751 days.
_MAX_DURATION_MS = (2**63 - 1) // 1_000_000

# Prometheus durations this command accepts: units from days down, each at most once, in order.
_DURATION = re.compile(r"(?=\d)(?:\d+d)?(?:\d+h)?(?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?\Z")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SEVERITY = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class BurnRate:
    """One alerting row: fire at ``severity`` while both windows burn at ``rate`` x or faster."""

    severity: str
    long_window: str
    short_window: str
    rate: float

    @property
    def row(self) -> str:
        """The row as ``--burn-rate`` writes it, ``page:1h/5m:14.4``: the value of its alerts' row label."""
        return f"{self.severity}:{self.long_window}/{self.short_window}:{_number(self.rate)}"


# The Site Reliability Workbook, table 5-8: 2% of a 30-day error budget in an hour, 5% in
# six hours (both page), 10% in three days (a ticket).
WORKBOOK_BURN_RATES = (
    BurnRate("page", "1h", "5m", 14.4),
    BurnRate("page", "6h", "30m", 6.0),
    BurnRate("ticket", "3d", "6h", 1.0),
)


def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration such as ``5m``, ``1h30m`` or ``3d``; ``ValueError`` otherwise."""
    if not _DURATION.match(text):
        raise ValueError(f"expected a duration such as 30s, 5m, 1h or 3d, got {text!r}")
    ms = sum(int(n) * _MS[unit] for n, unit in _DURATION_PART.findall(text))
    if ms <= 0:
        raise ValueError(f"expected a duration above zero, got {text!r}")
    if ms > _MAX_DURATION_MS:
        raise ValueError(f"expected a duration Prometheus can hold (at most about 106751d), got {text!r}")
    return ms / 1000


def parse_burn_rate(text: str) -> BurnRate:
    """``SEVERITY:LONG/SHORT:RATE``, e.g. ``page:1h/5m:14.4``; ``ValueError`` with the reason otherwise."""
    parts = text.split(":")
    windows = parts[1].split("/") if len(parts) == 3 else []
    if len(windows) != 2:
        raise ValueError(f"expected SEVERITY:LONG/SHORT:RATE such as page:1h/5m:14.4, got {text!r}")
    severity, (long_window, short_window), rate_text = parts[0], windows, parts[2]
    if not _SEVERITY.match(severity):
        raise ValueError(f"severity must match [a-z][a-z0-9_]*, got {severity!r} in {text!r}")
    if duration_seconds(short_window) >= duration_seconds(long_window):
        raise ValueError(f"the short window must be shorter than the long one, got {text!r}")
    try:
        rate = float(rate_text)
    except ValueError:
        rate = float("nan")
    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"expected a positive burn rate such as 14.4, got {rate_text!r} in {text!r}")
    return BurnRate(severity, long_window, short_window, rate)


def ratio_record(window: str) -> str:
    """The name of the recorded violation ratio over ``window``."""
    return f"{RATIO_RECORD}{window}"


def format_objective(fraction: float) -> str:
    """0.999 -> ``99.9%``."""
    return _percent(Decimal(repr(fraction)))


def _percent(fraction: Decimal) -> str:
    return format((fraction * 100).normalize(), "f") + "%"


@dataclass(frozen=True)
class _Target:
    """A budget whose violation ratio is recorded: a stage's, the total's or the first token's."""

    stage: str
    kind: str  # "stage", "total" or "first_token"

    def matchers(self) -> list[str]:
        return [f"{STAGE_LABEL}={_quote(self.stage)}", f"{KIND_LABEL}={_quote(self.kind)}"]

    def labels(self) -> dict[str, str]:
        """The labels its series carry; written on its rules too, which tells the rules apart."""
        return {STAGE_LABEL: self.stage, KIND_LABEL: self.kind}


@dataclass(frozen=True)
class _Objective:
    """An objective on one target under one profile, with what the alert should say about it."""

    target: _Target
    profile: str
    objective: float
    budget: str  # for people: "3500ms, first token 800ms, at most 4 calls"
    subject: str  # what is over budget: "model_call", "total time", "time to first token"
    jaeger_tags: dict[str, str]
    min_duration: str | None = None


def _quote(value: str) -> str:
    return promql_string(value)


def _selector(metric: str, matchers: Iterable[str]) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def _stage_budget_text(budget: StageBudget) -> str:
    parts = []
    if budget.budget_ms is not None:
        parts.append(format_ms(budget.budget_ms))
    if budget.first_token_ms is not None:
        parts.append(f"first token {format_ms(budget.first_token_ms)}")
    if budget.max_calls is not None:
        parts.append(f"at most {plural(budget.max_calls, 'call')}")
    return ", ".join(parts) + (", severity warn" if budget.severity == "warn" else "")


def _targets_and_objectives(config: BudgetConfig) -> tuple[list[_Target], list[_Objective]]:
    sets: list[BudgetSet] = [config.default, *(profile.budgets for profile in config.profiles)]
    targets: list[_Target] = []
    objectives: list[_Objective] = []
    for name in config.stage_names:
        target = _Target(name, "stage")
        for budgets in sets:
            stage = budgets.stage(name)
            if not stage.has_budget:
                continue
            if target not in targets:
                targets.append(target)
            if stage.objective is not None:
                flag = WARNED if stage.severity == "warn" else VIOLATED
                objectives.append(
                    _Objective(
                        target,
                        budgets.profile,
                        stage.objective,
                        _stage_budget_text(stage),
                        name,
                        {STAGE: name, flag: "true"},
                    )
                )
    for kind in ("total", "first_token"):
        target = _Target(TOTAL, kind)
        for budgets in sets:
            budget_ms = budgets.total_ms if kind == "total" else budgets.first_token_ms
            objective = budgets.total_objective if kind == "total" else budgets.first_token_objective
            if budget_ms is None:
                continue
            if target not in targets:
                targets.append(target)
            if objective is None:
                continue
            warn = ", severity warn" if budgets.severity == "warn" else ""
            tags = {PROFILE: budgets.profile}
            if kind == "total":
                objectives.append(
                    _Objective(
                        target,
                        budgets.profile,
                        objective,
                        f"total {format_ms(budget_ms)}{warn}",
                        "total time",
                        tags,
                        min_duration=format_ms(budget_ms),
                    )
                )
            else:
                if budgets.severity == "error":
                    tags[VIOLATED] = "true"
                objectives.append(
                    _Objective(
                        target,
                        budgets.profile,
                        objective,
                        f"first token {format_ms(budget_ms)} from the request's start{warn}",
                        "time to first token",
                        tags,
                    )
                )
    return targets, objectives


def _ratio_expr(target: _Target, window: str, service: str | None) -> str:
    matchers = ([f"{SERVICE_LABEL}={_quote(service)}"] if service else []) + target.matchers()
    by = ", ".join(GROUP_BY)
    over = _selector(REQUESTS_METRIC, [*matchers, f'{WITHIN_LABEL}="false"'])
    judged = _selector(REQUESTS_METRIC, matchers)
    # Without a single request over budget the "false" series does not exist: `or` fills in 0
    # for every group that has requests, so a healthy stage records 0, not nothing.
    return (
        f"(\n  sum by ({by}) (rate({over}[{window}]))\n  or\n  0 * sum by ({by}) (rate({judged}[{window}]))\n)\n"
        f"/\nsum by ({by}) (rate({judged}[{window}]))\n"
    )


def _number(value: float) -> str:
    """A burn rate as written by people (14.4, 6, 1), exactly: PromQL reads the same number back."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _threshold(objective: float, burn: BurnRate) -> Decimal:
    """The ratio above which ``burn`` fires at ``objective``, exactly (``14.4 * 0.001`` is ``0.0144``)."""
    return Decimal(repr(burn.rate)) * (1 - Decimal(repr(objective)))


def _decimal(value: Decimal) -> str:
    return format(value.normalize(), "f")


# The alert's own service_name label as one POSIX shell word, quoted when the alert fires
# (a label value is not ours to check): '...' with each ' written as '\''.
_SERVICE_WORD = """'{{ reReplaceAll "'" "'\\\\''" $labels.service_name }}'"""


def _words(*words: str) -> str:
    """A command line of shell words, each safe in an annotation (never expanded as a template)."""
    return " ".join(template_text(shell_word(word)) for word in words)


def _alert(
    objective: _Objective, burn: BurnRate, *, source: str, service: str | None, jaeger_url: str
) -> dict[str, Any]:
    # With --service, other rules files may record the same ratios for other services.
    matchers = [f"{SERVICE_LABEL}={_quote(service)}"] if service else []
    matchers += [*objective.target.matchers(), f"{PROFILE_LABEL}={_quote(objective.profile)}"]
    objective_text = format_objective(objective.objective)
    allowed = 1 - Decimal(repr(objective.objective))
    burning = _percent(Decimal(repr(burn.rate)) * allowed)
    threshold = _decimal(_threshold(objective.objective, burn))
    expr = (
        f"{_selector(ratio_record(burn.long_window), matchers)} > {threshold}\n"
        f"and\n{_selector(ratio_record(burn.short_window), matchers)} > {threshold}\n"
    )
    jaeger = jaeger_url.rstrip("/")
    # Without --service, the alert's own service_name label names the service, filled in by the template.
    service_word = template_text(shell_word(service)) if service else _SERVICE_WORD
    service_query = (
        template_text(urllib.parse.quote(service, safe="")) if service else "{{ $labels.service_name | urlquery }}"
    )
    query = {"tags": json.dumps(objective.jaeger_tags, separators=(",", ":"))}
    if objective.min_duration:
        query["minDuration"] = objective.min_duration
    search = f"{template_text(jaeger)}/search?service={service_query}&{template_text(urllib.parse.urlencode(query))}"
    profile = template_text(f"profile {objective.profile}")
    subject = template_text(objective.subject)
    where = template_text(source)
    return {
        "alert": ALERT_NAME,
        "expr": expr,
        "labels": {
            "severity": burn.severity,
            "window": burn.long_window,
            ROW_LABEL: burn.row,
            **objective.target.labels(),
            PROFILE_LABEL: objective.profile,
        },
        "annotations": {
            "summary": (
                f"{subject} over budget in {{{{ $value | humanizePercentage }}}} of requests over the last "
                f"{burn.long_window} ({profile}; objective {objective_text} within budget)"
            ),
            "description": (
                f"Budget ({where}, {profile}): {objective.budget}. The objective keeps {objective_text} of requests "
                f"within it, so at most {_percent(allowed)} may break it. Over the last {burn.long_window}, "
                f"{{{{ $value | humanizePercentage }}}} of requests broke it, and over the last {burn.short_window} "
                f"more than {burning} did: the error budget is burning at least {_number(burn.rate)}x as fast as "
                "the objective allows."
            ),
            "budget": objective.budget,
            "objective": objective_text,
            "ratio": "{{ $value | humanizePercentage }}",
            "next": (
                f"{_words('latency-budget', 'report', '--jaeger', jaeger)} --service {service_word} "
                f"{_words('--lookback', burn.long_window, '--budgets', source)}"
            ),
            "jaeger_search": search,
        },
    }


def _metadata(objective: _Objective, *, service: str | None, period: str) -> list[dict[str, Any]]:
    """The error-budget records of one objective: objective, budget, burn rate and remaining budget over ``period``."""
    labels = {**objective.target.labels(), PROFILE_LABEL: objective.profile}
    if service:
        labels = {SERVICE_LABEL: service, **labels}
    budget = 1 - Decimal(repr(objective.objective))
    matchers = [f"{key}={_quote(value)}" for key, value in labels.items()]
    over_period = {**labels, PERIOD_LABEL: period}
    period_matchers = [*matchers, f"{PERIOD_LABEL}={_quote(period)}"]
    return [
        {"record": OBJECTIVE_RECORD, "expr": f"vector({objective.objective!r})", "labels": labels},
        {"record": ERROR_BUDGET_RECORD, "expr": f"vector({_decimal(budget)})", "labels": labels},
        {
            "record": BURN_RATE_RECORD,
            "expr": f"{_selector(ratio_record(period), matchers)} / {_decimal(budget)}",
            "labels": over_period,
        },
        {
            "record": REMAINING_RECORD,
            "expr": f"1 - {_selector(BURN_RATE_RECORD, period_matchers)}",
            "labels": over_period,
        },
    ]


class TooManyRules(ValueError):
    """The budget file and rows would give more rules than the limit allows (checked before any work)."""


def rules_bound(config: BudgetConfig, burn_rates: Sequence[BurnRate]) -> int:
    """Stages (with total and first token) x (profiles + 1) x burn-rate rows: what the limit is checked against."""
    return (len(config.stage_names) + 2) * (len(config.profiles) + 1) * max(1, len(burn_rates))


def rules_document(
    config: BudgetConfig,
    *,
    source: str,
    burn_rates: Sequence[BurnRate] = WORKBOOK_BURN_RATES,
    service: str | None = None,
    jaeger_url: str = "http://localhost:16686",
    period: str = DEFAULT_PERIOD,
    max_rules: int = DEFAULT_MAX_RULES,
) -> tuple[str, list[str]]:
    """The rules file for ``config`` as YAML text, and notes for the user (objectives that cannot alert).

    ``source`` names the budget file in comments and annotations; ``service`` restricts
    every rule to series whose ``service_name`` is that service; ``period`` is the SLO
    period of the error-budget records. More than ``max_rules`` (see :func:`rules_bound`)
    raises :class:`TooManyRules` before anything is built.
    """
    bound = rules_bound(config, burn_rates)
    if bound > max_rules:
        raise TooManyRules(
            f"{len(config.stage_names) + 2} stages (with total and first token) x {len(config.profiles) + 1} "
            f"profiles x {len(burn_rates)} burn-rate rows is {bound:,} alerts, over the limit of {max_rules:,}"
        )
    rows = [burn.row for burn in burn_rates]
    repeated = sorted({row for row in rows if rows.count(row) > 1})
    if repeated:
        raise ValueError(f"--burn-rate {repeated[0]} is given twice: its alerts could not be told apart")
    targets, objectives = _targets_and_objectives(config)
    windows = {w for burn in burn_rates for w in (burn.long_window, burn.short_window)}
    if objectives:
        windows.add(period)
    notes: list[str] = []
    rules: list[dict[str, Any]] = []
    for target in targets:
        for window in sorted(windows, key=duration_seconds):
            rules.append(
                {
                    "record": ratio_record(window),
                    "expr": _ratio_expr(target, window, service),
                    "labels": target.labels(),
                }
            )
    for objective in objectives:
        rules.extend(_metadata(objective, service=service, period=period))
    for objective in objectives:
        for burn in burn_rates:
            if _threshold(objective.objective, burn) >= 1:
                notes.append(
                    f"{_describe(objective)}: objective {format_objective(objective.objective)} with a "
                    f"{_number(burn.rate)}x burn rate would need more than every request over budget: "
                    f"the {burn.severity} alert over {burn.long_window}/{burn.short_window} can never fire"
                )
            rules.append(_alert(objective, burn, source=source, service=service, jaeger_url=jaeger_url))
    if not objectives:
        notes.append(f"{source} sets no objective: recording rules only (add e.g. 'objective: 99%' at the top)")
    header = _header(source, burn_rates, service, period)
    group = {"name": f"latency-budget {service or source}", "rules": rules}
    return header + _yaml_groups([group]), notes


def _describe(objective: _Objective) -> str:
    target = objective.target
    what = f"stage {target.stage}" if target.kind == "stage" else f"{target.kind}_ms"
    return f"{what} (profile {objective.profile})"


def _header(source: str, burn_rates: Sequence[BurnRate], service: str | None, period: str) -> str:
    rows = ", ".join(f"{b.severity} {b.long_window}/{b.short_window} {_number(b.rate)}x" for b in burn_rates)
    scope = f" of service {yaml_comment(service)}" if service else ""
    return (
        f"# Prometheus rules for the latency budgets of {yaml_comment(source)}{scope},\n"
        f"# generated by `latency-budget rules` (otel-latency-budget {__version__}): regenerate, do not edit.\n"
        f"# {RATIO_RECORD}<window>: share of requests over a budget, per {', '.join(GROUP_BY)},\n"
        f"#   from {REQUESTS_METRIC} as collector-config.yaml exports it.\n"
        f"# {OBJECTIVE_RECORD}, {ERROR_BUDGET_RECORD}: each objective and its error budget;\n"
        f"#   {BURN_RATE_RECORD}, {REMAINING_RECORD}: over the SLO period ({period}).\n"
        f"# {ALERT_NAME}: multi-window, multi-burn-rate alerts (The Site Reliability Workbook, ch. 5),\n"
        f"#   one per row, labelled {ROW_LABEL}: {rows}.\n"
    )


def _yaml_value(value: str, indent: str, *, block: bool = False) -> str:
    """A string value after ``key:``: PromQL (``block``) as a literal block, anything else double-quoted."""
    lines = value.split("\n")
    if block and value.strip() and not value.startswith(" ") and all(line.isprintable() for line in lines):
        chomp = "" if value.endswith("\n") and not value.endswith("\n\n") else "-"
        body = lines[:-1] if value.endswith("\n") else lines
        return f"|{chomp}\n" + "".join(f"{indent}{line}\n" if line else "\n" for line in body)
    return f"{yaml_scalar(value)}\n"


def _yaml_groups(groups: Sequence[dict[str, Any]]) -> str:
    """The ``groups:`` document; keys are our own names, every value goes through a YAML encoder."""
    out = ["groups:\n"]
    for group in groups:
        out.append(f"- name: {yaml_scalar(group['name'])}\n  rules:\n")
        for rule in group["rules"]:
            first = True
            for key, value in rule.items():
                lead = "  - " if first else "    "
                first = False
                if isinstance(value, dict):
                    out.append(f"{lead}{key}:\n")
                    out.extend(f"      {name}: {_yaml_value(text, '        ')}" for name, text in value.items())
                else:
                    out.append(f"{lead}{key}: {_yaml_value(value, '      ', block=key == 'expr')}")
    return "".join(out)
