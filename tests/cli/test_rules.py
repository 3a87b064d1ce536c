"""`latency-budget rules`: which recording rules and alerts a budget file gives, its options and its errors.

promtool checks the same output in tests/prometheus; a real Prometheus runs it in tests/e2e.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from latency_budget.cli import main

from .conftest import REPO, run_cli

EXAMPLE = REPO / "budgets.example.yaml"
WINDOWS = ["5m", "30m", "1h", "6h", "3d", "30d"]  # the alert windows and the SLO period


def _generate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[dict[str, Any]], str]:
    """The rules of `latency-budget rules ARGS` (one group), and what it wrote to standard error."""
    assert main(["rules", *args]) == 0
    out, err = capsys.readouterr()
    document = yaml.safe_load(out)
    (group,) = document["groups"]
    return list(group["rules"]), err


def _budgets(tmp_path: Path, text: str) -> str:
    path = tmp_path / "budgets.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_example_records_every_budget_over_every_window(capsys: pytest.CaptureFixture[str]) -> None:
    """Each stage with a budget, the total and the first token get one ratio rule per alert window and the period."""
    rules, _ = _generate(capsys, str(EXAMPLE))
    recorded = [
        (r["record"].removeprefix("latency_budget:requests_over_budget:ratio_rate"), r["labels"])
        for r in rules
        if r.get("record", "").startswith("latency_budget:requests_over_budget:")
    ]
    targets = [("guardrails", "stage"), ("cache", "stage"), ("retrieval", "stage"), ("model_call", "stage")]
    targets += [("tool_calls", "stage"), ("validation", "stage"), ("total", "total"), ("total", "first_token")]
    assert recorded == [
        (window, {"latency_budget_stage": stage, "latency_budget_kind": kind})
        for stage, kind in targets
        for window in WINDOWS
    ]
    model_1h = next(
        r["expr"]
        for r in rules
        if r.get("record", "").endswith("rate1h") and r["labels"]["latency_budget_stage"] == "model_call"
    )
    assert 'latency_budget_requests_total{latency_budget_stage="model_call", latency_budget_kind="stage", ' in model_1h
    assert 'latency_budget_within_budget="false"}[1h]' in model_1h


def test_example_alerts_on_each_objective_with_the_workbook_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """Per profile and budget with an objective: page 1h/5m at 14.4x, page 6h/30m at 6x, ticket 3d/6h at 1x."""
    rules, err = _generate(capsys, str(EXAMPLE))
    assert err == ""
    alerts = [r for r in rules if "alert" in r]
    assert {r["alert"] for r in alerts} == {"LatencyBudgetBurnRate"}
    keys = {
        (r["labels"]["latency_budget_profile"], r["labels"]["latency_budget_stage"], r["labels"]["latency_budget_kind"])
        for r in alerts
    }
    stages = {"guardrails", "cache", "retrieval", "model_call", "tool_calls", "validation"}
    expected = {(p, s, "stage") for p in ("default", "voice") for s in stages}
    expected |= {(p, "total", k) for p in ("default", "voice") for k in ("total", "first_token")}
    assert keys == expected
    assert len(alerts) == 3 * len(expected)
    guardrails = [
        r
        for r in alerts
        if r["labels"]["latency_budget_stage"] == "guardrails" and r["labels"]["latency_budget_profile"] == "default"
    ]
    assert [(r["labels"]["severity"], r["labels"]["window"]) for r in guardrails] == [
        ("page", "1h"),
        ("page", "6h"),
        ("ticket", "3d"),
    ]
    page = guardrails[0]
    assert page["expr"] == (
        'latency_budget:requests_over_budget:ratio_rate1h{latency_budget_stage="guardrails", '
        'latency_budget_kind="stage", latency_budget_profile="default"} > 0.72\n'
        "and\n"
        'latency_budget:requests_over_budget:ratio_rate5m{latency_budget_stage="guardrails", '
        'latency_budget_kind="stage", latency_budget_profile="default"} > 0.72\n'
    )
    annotations = page["annotations"]
    assert annotations["budget"] == "200ms, severity warn"
    assert annotations["objective"] == "95%"
    assert annotations["ratio"] == "{{ $value | humanizePercentage }}"
    assert annotations["next"] == (
        "latency-budget report --jaeger http://localhost:16686 "
        """--service '{{ reReplaceAll "'" "'\\\\''" $labels.service_name }}' """
        f"--lookback 1h --budgets {EXAMPLE}"
    )
    # A warn-level stage's spans over budget are marked latency_budget.warned, not .violated.
    assert annotations["jaeger_search"].endswith(
        "tags=%7B%22latency_budget.stage%22%3A%22guardrails%22%2C%22latency_budget.warned%22%3A%22true%22%7D"
    )
    assert "more than 72% did" in annotations["description"]  # 14.4 x 5%


def test_objectives_are_recorded_for_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    """latency_budget:objective:ratio holds each objective, labelled like the ratio it applies to."""
    rules, _ = _generate(capsys, str(EXAMPLE))
    objectives = {
        (
            r["labels"]["latency_budget_profile"],
            r["labels"]["latency_budget_stage"],
            r["labels"]["latency_budget_kind"],
        ): r["expr"]
        for r in rules
        if r.get("record") == "latency_budget:objective:ratio"
    }
    assert objectives[("default", "guardrails", "stage")] == "vector(0.95)"
    assert objectives[("default", "model_call", "stage")] == "vector(0.99)"
    assert objectives[("voice", "total", "first_token")] == "vector(0.995)"
    assert objectives[("voice", "total", "total")] == "vector(0.99)"


def test_service_restricts_every_selector(capsys: pytest.CaptureFixture[str]) -> None:
    """--service NAME puts service_name="NAME" in every selector, alerts included, and in the annotations."""
    rules, _ = _generate(capsys, str(EXAMPLE), "--service", 'eu "checkout"')
    selectors = [s for r in rules for s in re.findall(r"latency_budget[_:a-z0-9]+\{[^}]*\}", r["expr"])]
    assert {s.split("{")[0] for s in selectors} == {
        "latency_budget_requests_total",
        *(f"latency_budget:requests_over_budget:ratio_rate{window}" for window in WINDOWS),
        "latency_budget:period_burn_rate:ratio",
    }
    assert all(s.split("{")[1].startswith('service_name="eu \\"checkout\\"", ') for s in selectors)
    alert = next(r for r in rules if "alert" in r)
    assert """--service 'eu "checkout"' """ in alert["annotations"]["next"]
    assert "search?service=eu%20%22checkout%22&" in alert["annotations"]["jaeger_search"]


def test_burn_rates_replace_the_workbook_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """--burn-rate rows replace the defaults, and their windows are the ones recorded."""
    rules, _ = _generate(capsys, str(EXAMPLE), "--burn-rate", "page:2m/30s:10", "--burn-rate", "ticket:1h30m/10m:2.5")
    windows = {r["record"].rsplit("rate", 1)[1] for r in rules if r.get("record", "").startswith("latency_budget:req")}
    assert windows == {"30s", "2m", "10m", "1h30m", "30d"}
    rows = {(r["labels"]["severity"], r["labels"]["window"]) for r in rules if "alert" in r}
    assert rows == {("page", "2m"), ("ticket", "1h30m")}
    assert any("> 0.025\n" in r["expr"] for r in rules if "alert" in r)  # 2.5 x (1 - 99%), exactly


def test_a_file_without_objectives_gets_recording_rules_and_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No objective anywhere: ratios are still recorded, no alert is written, and stderr says why."""
    path = _budgets(tmp_path, "version: 1\nstages: {model_call: {budget_ms: 800}}\n")
    rules, err = _generate(capsys, path)
    assert [r for r in rules if "alert" in r] == []
    assert {r["labels"]["latency_budget_stage"] for r in rules} == {"model_call", "total"}
    assert err == (
        f"latency-budget: note: {path} sets no objective: recording rules only (add e.g. 'objective: 99%' at the top)\n"
    )


def test_an_alert_that_can_never_fire_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An objective of 90% with a 14.4x burn rate needs 144% of requests over budget: the note says so."""
    path = _budgets(tmp_path, "version: 1\nstages: {model_call: {budget_ms: 800, objective: 90%}}\n")
    _, err = _generate(capsys, path)
    assert err == (
        "latency-budget: note: stage model_call (profile default): objective 90% with a 14.4x burn rate would need "
        "more than every request over budget: the page alert over 1h/5m can never fire\n"
    )


def test_stages_without_a_budget_get_no_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tracked stage (no budget in any profile) has nothing to record; one budgeted only in a profile does."""
    path = _budgets(
        tmp_path,
        "version: 1\nobjective: 99%\nstages:\n  model_call: {}\n  rerank: {match: {name: rerank}}\n"
        "profiles:\n  - name: batch\n    when: {name: batch}\n    stages: {rerank: {budget_ms: 50}}\n",
    )
    rules, _ = _generate(capsys, path)
    stages = {r["labels"]["latency_budget_stage"] for r in rules if "record" in r}
    assert stages == {"rerank", "total"}
    alerted = {
        (r["labels"]["latency_budget_profile"], r["labels"]["latency_budget_stage"]) for r in rules if "alert" in r
    }
    assert alerted == {("batch", "rerank"), ("batch", "total")}


def test_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o FILE writes the rules there, headed by a comment naming the budget file, and says so on stderr."""
    out = tmp_path / "rules.yml"
    assert main(["rules", str(EXAMPLE), "-o", str(out)]) == 0
    assert capsys.readouterr() == ("", f"Wrote {out}.\n")
    text = out.read_text(encoding="utf-8")
    assert text.startswith(f"# Prometheus rules for the latency budgets of {EXAMPLE},\n")
    assert yaml.safe_load(text)["groups"][0]["name"] == f"latency-budget {EXAMPLE}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--burn-rate", "page:1h:14.4"],
            "expected SEVERITY:LONG/SHORT:RATE such as page:1h/5m:14.4, got 'page:1h:14.4'",
        ),
        (
            ["--burn-rate", "page:5m/1h:14.4"],
            "the short window must be shorter than the long one, got 'page:5m/1h:14.4'",
        ),
        (["--burn-rate", "page:1h/5x:14.4"], "expected a duration such as 30s, 5m, 1h or 3d, got '5x'"),
        (["--burn-rate", "page:1h/0m:14.4"], "expected a duration above zero, got '0m'"),
        (["--burn-rate", "page:1h/5m:fast"], "expected a positive burn rate such as 14.4, got 'fast'"),
        (["--burn-rate", "page:1h/5m:-1"], "expected a positive burn rate such as 14.4, got '-1'"),
        (["--burn-rate", "Page:1h/5m:1"], "severity must match [a-z][a-z0-9_]*, got 'Page'"),
    ],
)
def test_bad_burn_rates_are_one_line_usage_errors(args: list[str], message: str) -> None:
    """A malformed --burn-rate exits 2 with one line that says what is wrong."""
    result = run_cli("rules", EXAMPLE, *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_a_bad_budget_file_is_one_line_with_file_line_and_key(tmp_path: Path) -> None:
    """An invalid budget file exits 2 with the loader's file:line: key: message, and writes nothing."""
    path = _budgets(tmp_path, "version: 1\nstages:\n  model_call: {budget_ms: 800, objective: 100%}\n")
    result = run_cli("rules", path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"latency-budget: {path}:3: stages.model_call.objective: expected a percentage above 0% and below 100% "
        "(at most 6 decimals) such as '99%' or '99.9%', got '100%'\n"
    )


def test_an_unwritable_output_is_one_line(tmp_path: Path) -> None:
    """-o into a folder that does not exist exits 4 (the output error code) with one line naming the file."""
    out = tmp_path / "missing" / "rules.yml"
    result = run_cli("rules", EXAMPLE, "-o", out)
    assert result.returncode == 4
    assert result.stderr.startswith(f"latency-budget: {out}: cannot write: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_alerting_page_shows_a_generated_alert_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """The alert in docs/alerting.md is, key for key, what the command it names writes."""
    readme = (REPO / "docs" / "alerting.md").read_text(encoding="utf-8")
    section = readme.split("# Alerting on budgets", 1)[1]
    match = re.search(r"A generated alert \(`latency-budget (rules [^`]+)`\):\n\n```yaml\n(.*?)```", section, re.S)
    assert match is not None
    command, block = match.groups()
    (shown,) = yaml.safe_load(block)
    args = command.split()
    assert args[:2] == ["rules", "budgets.example.yaml"]
    rules, _ = _generate(capsys, str(EXAMPLE), *args[2:])
    labels = shown["labels"]
    (written,) = [r for r in rules if "alert" in r and r["labels"] == labels]
    written["annotations"] = {
        key: value.replace(str(EXAMPLE), "budgets.example.yaml") for key, value in written["annotations"].items()
    }
    assert written == shown


def test_a_row_at_exactly_the_whole_budget_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """page:2h/10m:10 at 90% needs more than 100% of requests over budget: noted, and its threshold is exactly 1."""
    path = _budgets(tmp_path, "version: 1\nstages: {model_call: {budget_ms: 800, objective: 90%}}\n")
    rules, err = _generate(capsys, path, "--burn-rate", "page:2h/10m:10")
    assert err == (
        "latency-budget: note: stage model_call (profile default): objective 90% with a 10x burn rate would need "
        "more than every request over budget: the page alert over 2h/10m can never fire\n"
    )
    (alert,) = [r for r in rules if "alert" in r and r["labels"]["latency_budget_kind"] == "stage"]
    assert alert["expr"].endswith("} > 1\n")


def test_error_budget_metadata_per_objective(capsys: pytest.CaptureFixture[str]) -> None:
    """Each objective gets its error budget, its burn rate over the SLO period and the budget left over it."""
    rules, _ = _generate(capsys, str(EXAMPLE), "--slo-period", "28d")
    model_call = {"latency_budget_stage": "model_call", "latency_budget_kind": "stage"}
    mine = [
        r
        for r in rules
        if "record" in r and r["labels"].items() >= {**model_call, "latency_budget_profile": "default"}.items()
    ]
    by_name = {r["record"]: r for r in mine if not r["record"].startswith("latency_budget:requests_over_budget")}
    assert by_name["latency_budget:error_budget:ratio"]["expr"] == "vector(0.01)"
    burn = by_name["latency_budget:period_burn_rate:ratio"]
    assert burn["expr"].startswith("latency_budget:requests_over_budget:ratio_rate28d{")
    assert burn["expr"].endswith("} / 0.01")
    assert burn["labels"]["latency_budget_period"] == "28d"
    remaining = by_name["latency_budget:period_error_budget_remaining:ratio"]
    assert remaining["expr"].startswith("1 - latency_budget:period_burn_rate:ratio{")


def test_every_alert_row_has_a_label_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """Two rows of one severity and long window give alerts told apart by latency_budget_burn_rate."""
    rules, _ = _generate(capsys, str(EXAMPLE), "--burn-rate", "page:1h/5m:14.4", "--burn-rate", "page:1h/10m:10")
    alerts = [r for r in rules if "alert" in r]
    keys = [tuple(sorted(r["labels"].items())) for r in alerts]
    assert len(set(keys)) == len(keys)
    assert {r["labels"]["latency_budget_burn_rate"] for r in alerts} == {"page:1h/5m:14.4", "page:1h/10m:10"}


def test_the_alerting_walk_through_quotes_the_demo_as_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/alerting.md's figure for model_call in the first 2,000 demo requests is what that demo run prints."""
    page = (REPO / "docs" / "alerting.md").read_text(encoding="utf-8")
    quoted = re.search(
        r"in the first 2,000 of the default seed, `model_call` breaks its\s+budget in\s+(\S+ \(\d+/\d+\))", page
    )
    assert quoted is not None
    assert main(["demo", "--requests", "2000", "--show", "0"]) == 0
    out = capsys.readouterr().out
    row = re.search(r"^default \| model_call +\| 3500ms \|.*\| (\S+ \(\d+/\d+\))$", out, re.M)
    assert row is not None
    assert quoted.group(1) == row.group(1)
