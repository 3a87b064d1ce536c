"""The generated rules under the real promtool: they pass ``promtool check rules``, and
``promtool test rules`` shows each alert firing just above its burn rate and silent just below.

The unit tests are written here from the generated rules themselves: synthetic
``latency_budget_requests_total`` series, one service per scenario, and the alerts
promtool must (and must not) see at one instant, with their annotations as Prometheus
renders them.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from latency_budget.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "budgets.example.yaml"

PROFILES = """\
version: 1
objective: 99.9%
total_ms: 2000
first_token_ms: 800
severity: warn
stages:
  retrieval: {budget_ms: 150, objective: 99%}
  model_call: {budget_ms: 1200, first_token_ms: 400, max_calls: 3}
  tool_calls: {budget_ms: 300, severity: warn}
  rerank: {match: {name: "rerank *"}}
profiles:
  - name: batch.v2
    when: {attributes: {http.route: /batch}}
    total_ms: 60000
    total_objective: 95%
    stages:
      model_call: {budget_ms: 30000, objective: 90%}
      rerank: {budget_ms: 500}
  - name: voice
    when: {name: "POST /voice*"}
    first_token_objective: 99.99%
"""

# The scenarios of the burn-rate test: service -> requests over budget per minute, out of 10,000.
TOTAL_PER_MINUTE = 10_000
STEADY = {
    "page-fast-above": 1450,  # 14.5% > 14.4 x 1%: every row fires
    "page-fast-below": 1430,  # 14.3%: the 1h/5m page stays silent, the others fire
    "page-slow-above": 610,  # 6.1% > 6 x 1%
    "page-slow-below": 590,  # 5.9%: only the ticket
    "ticket-above": 101,  # 1.01% > 1 x 1%
    "ticket-below": 99,  # 0.99%: nothing
    "healthy": 0,  # not one request over budget: the ratio is 0, not missing
}
BURST_ENDED = "burst-ended"  # 50% over budget, then none for the last 6 minutes
# 90 minutes of samples, one a minute: more than the 1h window. The 6h and 3d windows see only
# these, and so the same steady ratios (a service that started recently); promtool's work stays small.
MINUTES = 90
# Rules are evaluated every 30s and the test looks half a minute after the last sample, so no
# sample sits on a window's edge (Prometheus 2 includes a range's start, Prometheus 3 does not).
EVAL = "1h30m30s"
EVAL_MINUTES = MINUTES + 0.5
FIRING = {
    "page-fast-above": {"1h", "6h", "3d"},
    "page-fast-below": {"6h", "3d"},
    "page-slow-above": {"6h", "3d"},
    "page-slow-below": {"3d"},
    "ticket-above": {"3d"},
    "ticket-below": set(),
    "healthy": set(),
    # The 1h window is still far over 14.4%, but the 5m one is at 0: the page has reset.
    BURST_ENDED: {"6h", "3d"},
}
WINDOW_MINUTES = {"5m": 5, "30m": 30, "1h": 60, "6h": 360, "3d": 4320}


def _rules(tmp_path: Path, budgets: str | Path, *options: str) -> Path:
    source = Path(budgets) if isinstance(budgets, Path) else tmp_path / "budgets.yaml"
    if not isinstance(budgets, Path):
        source.write_text(budgets, encoding="utf-8")
    out = tmp_path / "rules.yml"
    assert main(["rules", str(source), "-o", str(out), *options]) == 0
    return out


def _promtool(promtool: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


def _rule_count(path: Path) -> int:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return sum(len(group["rules"]) for group in document["groups"])


@pytest.mark.parametrize(
    ("budgets", "options"),
    [
        (EXAMPLE, ()),
        (PROFILES, ()),
        (PROFILES, ("--service", 'checkout "eu"\\1', "--burn-rate", "page:2h/10m:10", "--burn-rate", "low:1d/2h:2")),
    ],
    ids=["example", "profiles", "profiles-service-and-burn-rates"],
)
def test_promtool_check_rules_accepts_the_generated_file(
    promtool: str, tmp_path: Path, budgets: str | Path, options: Sequence[str]
) -> None:
    """`promtool check rules --lint-fatal` (syntax, PromQL, templates, duplicates) passes on the generated rules."""
    rules = _rules(tmp_path, budgets, *options)
    result = _promtool(promtool, "check", "rules", "--lint-fatal", rules)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {_rule_count(rules)} rules found" in result.stdout


def _series(increments: Sequence[int]) -> str:
    """promtool's expanding notation for a counter at 0 at minute 0 that grows by ``increments[m]`` in minute m.

    ``a+bxn`` is the n+1 samples a, a+b, ..., a+n*b: the first run also writes the 0.
    """
    parts: list[str] = []
    value = start = 0
    while start < len(increments):
        step, end = increments[start], start
        while end < len(increments) and increments[end] == step:
            end += 1
        run = end - start
        parts.append(f"0+{step}x{run}" if start == 0 else f"{value + step}+{step}x{run - 1}")
        value += step * run
        start = end
    return " ".join(parts)


def _over_per_minute(service: str) -> list[int]:
    if service == BURST_ENDED:
        return [5000] * (MINUTES - 6) + [0] * 6
    return [STEADY[service]] * MINUTES


def _ratio(service: str, window: str) -> float:
    """Over budget / judged, over the samples inside the window that ends at EVAL (the oracle)."""
    over = _over_per_minute(service)
    first = EVAL_MINUTES - WINDOW_MINUTES[window]
    # The counter's sample at minute m has grown by the increments of minutes 0..m-1.
    inside = [m for m in range(MINUTES + 1) if first < m <= EVAL_MINUTES]
    grown = range(inside[0], inside[-1])
    return sum(over[m] for m in grown) / (TOTAL_PER_MINUTE * len(grown))


def _labels(service: str) -> dict[str, str]:
    return {
        "service_name": service,
        "latency_budget_stage": "model_call",
        "latency_budget_kind": "stage",
        "latency_budget_profile": "default",
    }


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


# The alert's service_name label as one shell word, as the generated `next` annotation writes it.
SERVICE_WORD = """'{{ reReplaceAll "'" "'\\\\''" $labels.service_name }}'"""


def _render(template: str, *, value: float, service: str) -> str:
    """What Prometheus's templates make of the four expressions the generated annotations use."""
    text = template.replace("{{ $value | humanizePercentage }}", f"{value * 100:.4g}%")
    text = text.replace("{{ $labels.service_name | urlquery }}", service)
    quoted = "'" + service.replace("'", "'\\''") + "'"  # the label as one shell word, as POSIX quotes it
    text = text.replace(SERVICE_WORD, quoted)
    assert "{{" not in text, f"an annotation uses a template this test does not render: {text}"
    return text


def _unit_tests(rules: Path) -> dict[str, Any]:
    document = yaml.safe_load(rules.read_text(encoding="utf-8"))
    # The file's total_ms (the sum of its stage budgets) has alerts too; its series are not fed here.
    alerts = [
        rule
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule and rule["labels"]["latency_budget_kind"] == "stage"
    ]
    assert {rule["labels"]["window"] for rule in alerts} == {"1h", "6h", "3d"}
    input_series = []
    # promtool matches an alert test by name only: one test lists every alert expected to fire.
    expected_alerts: list[dict[str, Any]] = []
    for service in [*STEADY, BURST_ENDED]:
        over = _over_per_minute(service)
        within = [TOTAL_PER_MINUTE - n for n in over]
        series = {True: within, False: over}
        for flag, increments in series.items():
            if flag is False and not any(increments):
                continue  # a stage that never broke its budget has no "false" series at all
            labels = {**_labels(service), "latency_budget_within_budget": str(flag).lower()}
            input_series.append(
                {"series": _selector("latency_budget_requests_total", labels), "values": _series(increments)}
            )
        for rule in alerts:
            window = rule["labels"]["window"]
            if window not in FIRING[service]:
                continue
            value = _ratio(service, window)  # $value: the left operand of `and`, the long window's ratio
            expected_alerts.append(
                {
                    "exp_labels": {**_labels(service), **rule["labels"]},
                    "exp_annotations": {
                        key: _render(text, value=value, service=service) for key, text in rule["annotations"].items()
                    },
                }
            )
    alert_test = {"eval_time": EVAL, "alertname": "LatencyBudgetBurnRate", "exp_alerts": expected_alerts}
    # promtool compares values exactly: the ratios in millionths, rounded as PromQL's round() does.
    ratio_tests = [
        {
            "expr": f"round(latency_budget:requests_over_budget:ratio_rate{window} * 1e6)",
            "eval_time": EVAL,
            "exp_samples": [
                {"labels": _selector("", _labels(service)), "value": math.floor(_ratio(service, window) * 1e6 + 0.5)}
                for service in [*STEADY, BURST_ENDED]
            ],
        }
        for window in WINDOW_MINUTES
    ]
    return {
        "rule_files": [rules.name],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "alert_rule_test": [alert_test],
                "promql_expr_test": ratio_tests,
            }
        ],
    }


def test_alerts_fire_just_above_their_burn_rate_and_stay_silent_just_below(promtool: str, tmp_path: Path) -> None:
    """Each workbook row fires just above its burn rate, stays silent just below it, and resets after a burst."""
    rules = _rules(tmp_path, "version: 1\nobjective: 99%\nstages:\n  model_call: {budget_ms: 800}\n")
    tests = tmp_path / "rules.test.yml"
    tests.write_text(yaml.safe_dump(_unit_tests(rules), sort_keys=False, width=1000), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", tests.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"SUCCESS", result.stdout), result.stdout


def test_the_unit_tests_can_fail(promtool: str, tmp_path: Path) -> None:
    """The same promtool test fails on rules with an objective of 98.9%: it checks thresholds, not just syntax."""
    rules = _rules(tmp_path, "version: 1\nobjective: 99%\nstages:\n  model_call: {budget_ms: 800}\n")
    tests = tmp_path / "rules.test.yml"
    tests.write_text(yaml.safe_dump(_unit_tests(rules), sort_keys=False, width=1000), encoding="utf-8")
    _rules(tmp_path, "version: 1\nobjective: 98.9%\nstages:\n  model_call: {budget_ms: 800}\n")  # same file name
    result = _promtool(promtool, "test", "rules", tests.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


# -- the docker compose stack ------------------------------------------------------------


def _compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    return document


def test_compose_pins_the_prometheus_ci_tests(promtool: str) -> None:
    """docker-compose.yml's Prometheus image is the release of the promtool these tests run (Debian's package)."""
    version = re.search(r"version (\d+\.\d+\.\d+)", _promtool(promtool, "--version").stdout)
    assert version is not None
    assert _compose()["services"]["prometheus"]["image"] == f"prom/prometheus:v{version.group(1)}"


def test_compose_prometheus_loads_the_generated_rules(promtool: str, tmp_path: Path) -> None:
    """Compose writes the rules where prometheus-config.yaml reads them, and the two pass `promtool check config`."""
    services = _compose()["services"]
    command = services["rules"]["command"]
    assert command[:3] == ["latency-budget", "rules", "budgets.example.yaml"]
    output = Path(command[command.index("--output") + 1])
    (rules_volume,) = [v for v in services["rules"]["volumes"] if v.endswith(f":{output.parent}")]
    mounted = next(v for v in services["prometheus"]["volumes"] if v.startswith(rules_volume.split(":")[0] + ":"))
    rules_dir = Path(mounted.split(":")[1])
    config = yaml.safe_load((REPO / "prometheus-config.yaml").read_text(encoding="utf-8"))
    (pattern,) = config["rule_files"]
    assert (rules_dir / output.name).match(pattern)
    # Run the same command here, and point a copy of the config at its output.
    (tmp_path / "rules").mkdir()
    generated = tmp_path / "rules" / output.name
    argv = [*command[1:2], str(REPO / command[2]), *command[3 : command.index("--output")], "-o", str(generated)]
    assert main(argv) == 0
    config["rule_files"] = [str(generated.parent / Path(pattern).name)]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = _promtool(promtool, "check", "config", copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {_rule_count(generated)} rules found" in result.stdout


def test_error_budget_records_and_row_labels_under_promtool(promtool: str, tmp_path: Path) -> None:
    """2% over budget at a 99% objective: error budget 1%, period burn rate 2, remaining -100%; each row its label."""
    rules = _rules(
        tmp_path,
        "version: 1\nobjective: 99%\nstages:\n  model_call: {budget_ms: 800}\n",
        "--burn-rate",
        "page:1h/5m:1.5",
        "--burn-rate",
        "page:1h/10m:1.8",  # the same severity and long window: only the row label tells the two apart
        "--slo-period",
        "7d",
    )
    lint = _promtool(promtool, "check", "rules", "--lint-fatal", rules)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    service = "budgeted"
    labels = _labels(service)
    over = [200] * MINUTES  # 2% of 10,000 a minute
    input_series = [
        {
            "series": _selector("latency_budget_requests_total", {**labels, "latency_budget_within_budget": "false"}),
            "values": _series(over),
        },
        {
            "series": _selector("latency_budget_requests_total", {**labels, "latency_budget_within_budget": "true"}),
            "values": _series([TOTAL_PER_MINUTE - n for n in over]),
        },
    ]
    document = yaml.safe_load(rules.read_text(encoding="utf-8"))
    alerts = [r for g in document["groups"] for r in g["rules"] if "alert" in r]
    stage_alerts = [r for r in alerts if r["labels"]["latency_budget_kind"] == "stage"]
    assert [r["labels"]["latency_budget_burn_rate"] for r in stage_alerts] == ["page:1h/5m:1.5", "page:1h/10m:1.8"]
    expected_alerts = [
        {
            "exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {
                key: _render(text, value=0.02, service=service) for key, text in rule["annotations"].items()
            },
        }
        for rule in stage_alerts  # 2% > 1.5% and > 1.8%: both rows fire, as two alerts
    ]
    objective = {key: value for key, value in labels.items() if key != "service_name"}
    period = {**labels, "latency_budget_period": "7d"}

    def sample(record: str, value: float, sample_labels: dict[str, str]) -> dict[str, Any]:
        return {
            "expr": f"round({record} * 1e6)",
            "eval_time": EVAL,
            "exp_samples": [{"labels": _selector("", sample_labels), "value": value}],
        }

    tests = {
        "rule_files": [rules.name],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "alert_rule_test": [
                    {"eval_time": EVAL, "alertname": "LatencyBudgetBurnRate", "exp_alerts": expected_alerts}
                ],
                "promql_expr_test": [
                    sample('latency_budget:objective:ratio{latency_budget_kind="stage"}', 990_000, objective),
                    sample('latency_budget:error_budget:ratio{latency_budget_kind="stage"}', 10_000, objective),
                    sample("latency_budget:period_burn_rate:ratio", 2_000_000, period),  # 2% / 1%
                    sample("latency_budget:period_error_budget_remaining:ratio", -1_000_000, period),  # overspent
                ],
            }
        ],
    }
    path = tmp_path / "budget.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=1000), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
