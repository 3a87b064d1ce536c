"""The pytest plugin, loaded through its pytest11 entry point as in users' projects.

The main scenario runs pytest in a fresh process, as users do; the option checks run
in-process, which is faster and safe here (the helper restores the global tracer state).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

BUDGETS = """\
version: 1
stages:
  model_call: {budget_ms: 800}
  guardrails:
    budget_ms: 50
    severity: warn
    match: {name: "guardrail*"}
"""

PIPELINE = """
from opentelemetry import trace

T0 = 1_700_000_000_000_000_000


def at(ms):
    return T0 + int(ms * 1_000_000)


def pipeline(model_ms=500, guard_ms=20):
    tracer = trace.get_tracer("app")
    root = tracer.start_span("answer", start_time=at(0))
    context = trace.set_span_in_context(root)
    tracer.start_span("chat", context=context, attributes={"gen_ai.operation.name": "chat"}, start_time=at(0)).end(
        end_time=at(model_ms)
    )
    tracer.start_span("guardrail", context=context, start_time=at(model_ms)).end(end_time=at(model_ms + guard_ms))
    root.end(end_time=at(model_ms + guard_ms))
"""

TESTS = """
from pipeline import pipeline


def test_fast(latency_budget):
    with latency_budget() as result:
        pipeline()
    assert result.report.stage("model_call").actual_ms == 500


def test_slow(latency_budget):
    with latency_budget():
        pipeline(model_ms=900)


def test_slow_guardrail(latency_budget):
    with latency_budget():
        pipeline(guard_ms=80)


def test_baseline(latency_budget):
    old = latency_budget(fn=pipeline, runs=12, percentile=50)
    slower = iter([700, 720, 740, 760] * 3)
    new = latency_budget(fn=lambda: pipeline(model_ms=next(slower)), runs=12, percentile=50)
    latency_budget.assert_no_regression(old, new, max_regression={"model_call": "10%"})


def test_repeated(latency_budget):
    durations = iter([500] * 9 + [3000])
    result = latency_budget(fn=lambda: pipeline(model_ms=next(durations)), runs=10, percentile=90)
    assert result.report.stage("model_call").actual_ms == 500
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's project: a budget file, an instrumented pipeline and tests that use the fixture."""
    pytester.makefile(".yaml", budgets=BUDGETS)
    pytester.makepyfile(pipeline=PIPELINE, test_pipeline=TESTS)
    pytester.makeini("[pytest]\nlatency_budgets = budgets.yaml\n")
    return pytester


def test_fixture_passes_fails_and_warns_with_the_stage_table(project: pytest.Pytester) -> None:
    """Via the pytest11 entry point: a fast pipeline passes, a slow one fails with the table, a warn-level one warns;
    the fixture's baseline comparison fails a model call slower than the baseline."""
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*latency budget exceeded: model_call, total (*budgets.yaml, profile default)*",
            "*Stage      | Budget | Actual | Within budget?*",
            "*model_call | 800ms  | 900ms  | NO  <-- over budget (duration)*",
            "E  *model_call, profile default: +2*ms (+4*%), interval * over the limit model_call=10%",
            "*LatencyBudgetWarning: latency budget warning: guardrails*",
            "*guardrails | 50ms   | 80ms   | warn (duration)*",
            "FAILED test_pipeline.py::test_slow - AssertionError: latency budget exceeded*",
            "FAILED test_pipeline.py::test_baseline - AssertionError: latency regression*",
        ]
    )


def test_command_line_option_overrides_the_ini_file(project: pytest.Pytester) -> None:
    """--latency-budgets FILE replaces the ini option's budget file."""
    project.makefile(".yaml", relaxed=BUDGETS.replace("800", "5000"))
    result = project.runpytest_inprocess("-p", "no:cacheprovider", "--latency-budgets", "relaxed.yaml", "-k", "slow")
    result.assert_outcomes(passed=2, warnings=1)


def test_plugin_can_be_disabled(project: pytest.Pytester) -> None:
    """-p no:latency_budget unloads the plugin: the fixture is then unknown."""
    result = project.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:latency_budget", "-k", "fast")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'latency_budget' not found*"])
