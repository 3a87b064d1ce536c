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

import yaml

from latency_budget._attributes import PROFILE, STAGE, VIOLATED, WARNED
from latency_budget._config import BudgetConfig, BudgetSet
from latency_budget._config.model import StageBudget
from latency_budget._core.report import TOTAL, format_ms
from latency_budget._version import __version__

__all__ = [
    "ALERT_NAME",
    "OBJECTIVE_RECORD",
    "RATIO_RECORD",
    "REQUESTS_METRIC",
    "WORKBOOK_BURN_RATES",
    "BurnRate",
    "parse_burn_rate",
    "ratio_record",
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
ALERT_NAME = "LatencyBudgetBurnRate"

# Prometheus durations this command accepts: units from days down, each at most once, in order.
_DURATION = re.compile(r"(?=\d)(?:\d+d)?(?:\d+h)?(?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?\Z")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SEVERITY = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class BurnRate:
    """One alerting row: fire at ``severity`` while both windows burn at ``rate`` x or faster."""

    severity: str
    long_window: str
    short_window: str
    rate: float


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
    seconds = sum(int(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"expected a duration above zero, got {text!r}")
    return float(seconds)


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
    """A PromQL string literal (JSON's escapes are a subset of PromQL's)."""
    return json.dumps(value)


def _selector(metric: str, matchers: Iterable[str]) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def _stage_budget_text(budget: StageBudget) -> str:
    parts = []
    if budget.budget_ms is not None:
        parts.append(format_ms(budget.budget_ms))
    if budget.first_token_ms is not None:
        parts.append(f"first token {format_ms(budget.first_token_ms)}")
    if budget.max_calls is not None:
        parts.append(f"at most {budget.max_calls} calls")
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


def _alert(
    objective: _Objective, burn: BurnRate, *, source: str, service: str | None, jaeger_url: str
) -> dict[str, Any]:
    # With --service, other rules files may record the same ratios for other services.
    matchers = [f"{SERVICE_LABEL}={_quote(service)}"] if service else []
    matchers += [*objective.target.matchers(), f"{PROFILE_LABEL}={_quote(objective.profile)}"]
    objective_text = format_objective(objective.objective)
    allowed = 1 - Decimal(repr(objective.objective))
    burning = _percent(Decimal(repr(burn.rate)) * allowed)
    threshold = f"({_number(burn.rate)} * (1 - {objective.objective!r}))"
    expr = (
        f"{_selector(ratio_record(burn.long_window), matchers)} > {threshold}\n"
        f"and\n{_selector(ratio_record(burn.short_window), matchers)} > {threshold}\n"
    )
    # Without --service, the alert's own service_name label names the service, filled in by the template.
    service_ref = service if service else "{{ $labels.service_name }}"
    service_query = urllib.parse.quote(service, safe="") if service else "{{ $labels.service_name | urlquery }}"
    query = {"tags": json.dumps(objective.jaeger_tags, separators=(",", ":"))}
    if objective.min_duration:
        query["minDuration"] = objective.min_duration
    search = f"{jaeger_url.rstrip('/')}/search?service={service_query}&{urllib.parse.urlencode(query)}"
    profile = f"profile {objective.profile}"
    return {
        "alert": ALERT_NAME,
        "expr": expr,
        "labels": {
            "severity": burn.severity,
            "window": burn.long_window,
            **objective.target.labels(),
            PROFILE_LABEL: objective.profile,
        },
        "annotations": {
            "summary": (
                f"{objective.subject} over budget in {{{{ $value | humanizePercentage }}}} of requests over the last "
                f"{burn.long_window} ({profile}; objective {objective_text} within budget)"
            ),
            "description": (
                f"Budget ({source}, {profile}): {objective.budget}. The objective keeps {objective_text} of requests "
                f"within it, so at most {_percent(allowed)} may break it. Over the last {burn.long_window}, "
                f"{{{{ $value | humanizePercentage }}}} of requests broke it, and over the last {burn.short_window} "
                f"more than {burning} did: the error budget is burning at least {_number(burn.rate)}x as fast as "
                "the objective allows."
            ),
            "budget": objective.budget,
            "objective": objective_text,
            "ratio": "{{ $value | humanizePercentage }}",
            "next": (
                f"latency-budget report --jaeger {jaeger_url.rstrip('/')} --service {service_ref} "
                f"--lookback {burn.long_window} --budgets {source}"
            ),
            "jaeger_search": search,
        },
    }


def rules_document(
    config: BudgetConfig,
    *,
    source: str,
    burn_rates: Sequence[BurnRate] = WORKBOOK_BURN_RATES,
    service: str | None = None,
    jaeger_url: str = "http://localhost:16686",
) -> tuple[str, list[str]]:
    """The rules file for ``config`` as YAML text, and notes for the user (objectives that cannot alert).

    ``source`` names the budget file in comments and annotations; ``service`` restricts
    every rule to series whose ``service_name`` is that service.
    """
    targets, objectives = _targets_and_objectives(config)
    windows = sorted({w for burn in burn_rates for w in (burn.long_window, burn.short_window)}, key=duration_seconds)
    notes: list[str] = []
    rules: list[dict[str, Any]] = []
    for target in targets:
        for window in windows:
            rules.append(
                {
                    "record": ratio_record(window),
                    "expr": _ratio_expr(target, window, service),
                    "labels": target.labels(),
                }
            )
    for objective in objectives:
        labels = {**objective.target.labels(), PROFILE_LABEL: objective.profile}
        if service:
            labels = {SERVICE_LABEL: service, **labels}
        rules.append({"record": OBJECTIVE_RECORD, "expr": f"vector({objective.objective!r})", "labels": labels})
    for objective in objectives:
        for burn in burn_rates:
            if burn.rate * (1 - objective.objective) >= 1:
                notes.append(
                    f"{_describe(objective)}: objective {format_objective(objective.objective)} with a "
                    f"{_number(burn.rate)}x burn rate would need more than every request over budget: "
                    f"the {burn.severity} alert over {burn.long_window}/{burn.short_window} can never fire"
                )
            rules.append(_alert(objective, burn, source=source, service=service, jaeger_url=jaeger_url))
    if not objectives:
        notes.append(f"{source} sets no objective: recording rules only (add e.g. 'objective: 99%' at the top)")
    header = _header(source, burn_rates, service)
    group = {"name": f"latency-budget {service or source}", "rules": rules}
    return header + yaml.dump({"groups": [group]}, Dumper=_Dumper, sort_keys=False, width=1000), notes


def _describe(objective: _Objective) -> str:
    target = objective.target
    what = f"stage {target.stage}" if target.kind == "stage" else f"{target.kind}_ms"
    return f"{what} (profile {objective.profile})"


def _header(source: str, burn_rates: Sequence[BurnRate], service: str | None) -> str:
    rows = ", ".join(f"{b.severity} {b.long_window}/{b.short_window} {_number(b.rate)}x" for b in burn_rates)
    scope = f" of service {service}" if service else ""
    return (
        f"# Prometheus rules for the latency budgets of {source}{scope},\n"
        f"# generated by `latency-budget rules` (otel-latency-budget {__version__}): regenerate, do not edit.\n"
        f"# {RATIO_RECORD}<window>: share of requests over a budget, per {', '.join(GROUP_BY)},\n"
        f"#   from {REQUESTS_METRIC} as collector-config.yaml exports it.\n"
        f"# {OBJECTIVE_RECORD}: each objective, for graphs. {ALERT_NAME}: multi-window, multi-burn-rate\n"
        f"#   alerts (The Site Reliability Workbook, ch. 5): {rows}.\n"
    )


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (PromQL) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
