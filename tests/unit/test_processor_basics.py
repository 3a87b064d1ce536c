"""The seed's scenarios, run as real spans through a real TracerProvider."""

from __future__ import annotations

from latency_budget import _attributes as attr

from .helpers import at, op, pipeline, violation_events


def test_techcorp_table_as_spans() -> None:
    """Sequential retrieval 45.2, model 1250, tools 150 under one root: model_call is over budget by 450 ms."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("retrieve", 0, 45.2, parent=root, attributes=op("retrieval"))
    p.run("chat", 45.2, 1295.2, parent=root, attributes=op("chat"))
    p.run("tool", 1295.2, 1445.2, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1445.2))

    exported = p.span("request")
    assert exported.attributes is not None
    assert exported.attributes[attr.OVER_BUDGET_STAGES] == ("model_call", "total")
    assert exported.attributes[attr.VIOLATED] is True
    assert exported.attributes[attr.TOTAL_BUDGET_MS] == 1100.0
    assert exported.attributes[attr.TOTAL_ACTUAL_MS] == 1445.2
    model = [e for e in violation_events(exported) if e[attr.STAGE] == "model_call"]
    assert len(model) == 1
    assert model[0][attr.KIND] == "duration"
    assert model[0][attr.OVER_MS] == 450.0
    assert model[0][attr.BUDGET_MS] == 800.0
    assert model[0][attr.ACTUAL_MS] == 1250.0
