"""Rules that read the resource (``resource: {service.name: ...}``): loaded, settled per resource, replayed."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from latency_budget import BudgetConfigError, load_budgets
from latency_budget._replay import SpanRecord, evaluate_spans

from .helpers import at

YAML = """\
version: 1
requests: {kind: server, resource: {service.name: [gateway, agent]}}
stages:
  retrieval:
    budget_ms: 50
    match: {name: "retrieve*", resource: {service.name: retrieval}}
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
profiles:
  - name: batch
    when: {resource: {deployment.environment: batch}}
    total_ms: 5000
total_ms: 300
"""


def test_bad_resource_condition_names_file_line_and_key() -> None:
    """A resource value that is not a string, number or boolean is an error naming the file, line and key."""
    text = YAML.replace("resource: {service.name: retrieval}", "resource: {service.name: {a: 1}}")
    with pytest.raises(BudgetConfigError, match=r"b\.yaml:6: stages\.retrieval\.match\.resource\.service\.name"):
        load_budgets(text=text, source="b.yaml")


def test_config_without_resource_rules_is_its_own_resolution() -> None:
    """A budget file whose rules never read the resource resolves to itself, whatever the resource."""
    config = load_budgets(text="version: 1\nstages:\n  retrieval: {budget_ms: 5}\n")
    assert config.resource_keys == ()
    assert config.for_resource({"service.name": "x"}) is config


def test_resolved_config_keeps_the_rules_the_resource_satisfies() -> None:
    """Resolved for a service, a rule holds only when its resource conditions do; unresolved, it matches nothing."""
    config = load_budgets(text=YAML)
    assert set(config.resource_keys) == {"service.name", "deployment.environment"}
    retrieval = config.for_resource({"service.name": "retrieval"})
    agent = config.for_resource({"service.name": "agent", "deployment.environment": "batch"})
    assert retrieval.classifier.classify("retrieve docs", SpanKind.INTERNAL, "", {}) == 0
    assert agent.classifier.classify("retrieve docs", SpanKind.INTERNAL, "", {}) == -1
    assert config.classifier.classify("retrieve docs", SpanKind.INTERNAL, "", {}) == -1
    assert agent.is_request("POST /ask", SpanKind.SERVER, "", {})
    assert not retrieval.is_request("POST /ask", SpanKind.SERVER, "", {})
    assert agent.budgets_for_root("POST /ask", SpanKind.SERVER, "", {}).profile == "batch"
    assert retrieval.budgets_for_root("POST /ask", SpanKind.SERVER, "", {}).profile == "default"
    assert retrieval.default is config.default  # the same budgets: spans of several resources add up
    assert retrieval.stage_names == config.stage_names
    assert config.for_resource({"service.name": "retrieval"}) is retrieval  # settled once per resource


def test_replay_matches_each_span_with_its_own_resource() -> None:
    """Replayed (check, report), a span counts for a resource rule only when its own resource satisfies it."""
    config = load_budgets(text=YAML)

    def trace(retrieval_service: str) -> list[SpanRecord]:
        agent = {"service.name": "agent"}
        return [
            SpanRecord(1, 1, None, "POST /ask", at(0), at(200), SpanKind.SERVER, resource=agent),
            SpanRecord(1, 2, 1, "retrieve docs", at(10), at(80), resource={"service.name": retrieval_service}),
            SpanRecord(1, 3, 1, "chat gpt", at(90), at(150), SpanKind.CLIENT, resource=agent),
        ]

    (matched,) = evaluate_spans(config, trace("retrieval"))
    (unmatched,) = evaluate_spans(config, trace("agent"))
    assert [s.stage for s in matched.stages if s.count] == ["retrieval", "model_call"]
    assert [s.stage for s in unmatched.stages if s.count] == ["model_call"]
