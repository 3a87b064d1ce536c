"""Planted lever traffic: requests through the real SDK pipeline, then ``report --format json`` on the same spans."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget.cli import main

from .helpers import Pipeline, at, pipeline
from .test_lever_hints import BUDGETS

# name, duration ms, attributes; optionally the instrumentation scope and events (name, attributes) at its end
Child = (
    tuple[str, float, Mapping[str, AttributeValue]]
    | tuple[str, float, Mapping[str, AttributeValue], str, Sequence[tuple[str, Mapping[str, AttributeValue]]]]
)


class Traffic:
    """Requests one after another through one processor; each a root whose children run back to back."""

    def __init__(self, budgets: str = BUDGETS) -> None:
        self.budgets = budgets
        self.p: Pipeline = pipeline(budgets)
        self.now = 0.0

    def send(self, *children: Child) -> None:
        root = self.p.start(f"request {self.now:g}", self.now)
        cursor = self.now
        for child in children:
            name, duration, attributes = child[:3]
            if len(child) == 3:
                self.p.run(name, cursor, cursor + duration, parent=root, attributes=attributes)
            else:
                _, _, _, scope, events = child
                span = self.p.provider.get_tracer(scope).start_span(
                    name, trace.set_span_in_context(root), attributes=attributes, start_time=at(cursor)
                )
                for event, values in events:
                    span.add_event(event, values, timestamp=at(cursor + duration))
                span.end(end_time=at(cursor + duration))
            cursor += duration
        root.end(end_time=at(cursor))
        self.now = cursor + 100

    def hints(self, kind: str) -> list[dict[str, object]]:
        """The processor's hint events of ``kind``, over every request, in the order the requests ended."""
        return [
            dict(event.attributes or {})
            for span in self.p.finished()
            if span.parent is None
            for event in span.events
            if event.name == attr.HINT_EVENT and (event.attributes or {}).get(attr.HINT_KIND) == kind
        ]

    def traces(self, tmp_path: Path) -> tuple[Path, Path]:
        """The exported spans as an OTLP JSON file, and the budget file, in ``tmp_path``."""
        traces = tmp_path / "traces.jsonl"
        traces.write_text(json.dumps(encode_otlp_json(self.p.finished())) + "\n", encoding="utf-8")
        budgets = tmp_path / "budgets.yaml"
        budgets.write_text(self.budgets, encoding="utf-8")
        return traces, budgets

    def report(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
        """``report --format json`` of the exported spans."""
        traces, budgets = self.traces(tmp_path)
        capsys.readouterr()
        assert main(["report", str(traces), "--budgets", str(budgets), "--format", "json"]) == 0
        data: dict[str, Any] = json.loads(capsys.readouterr().out)
        return data


def levers(report: Mapping[str, Any], kind: str) -> Sequence[Mapping[str, Any]]:
    """The report's Where to win rows of ``kind``."""
    return [row for row in report["where_to_win"] if row["kind"] == kind]
