"""One real operation, one call (issue 45 item 2), held against a slow, obvious oracle.

Random same-stage sibling spans (times, model, response id, token counts) through a real
pipeline: the model-call count is the number of groups that the definition of "the same
operation" links (compared on every pair, grouped by search), and the stage's wall-clock
time is the union of every span, twins included.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

from latency_budget import _attributes as attr
from latency_budget._core.calls import ALMOST_ENTIRELY, TOKEN_SLACK, TWIN_END_SLACK_MS, TWIN_START_SLACK_MS

from .helpers import at, pipeline


@dataclass(frozen=True)
class Drawn:
    start: int  # ms
    end: int
    model: str | None
    response_id: str | None
    output_tokens: int | None
    input_tokens: int | None
    scope: str  # the instrumentation that wrote it
    under_agent: bool = False  # a child of an agent span (no stage) rather than of the root

    def attributes(self) -> dict[str, object]:
        found: dict[str, object] = {"gen_ai.operation.name": "chat"}
        for key, value in (
            ("gen_ai.request.model", self.model),
            ("gen_ai.response.id", self.response_id),
            ("gen_ai.usage.output_tokens", self.output_tokens),
            ("gen_ai.usage.input_tokens", self.input_tokens),
        ):
            if value is not None:
                found[key] = value
        return found


@st.composite
def drawn(draw: st.DrawFn) -> Drawn:
    start = draw(st.sampled_from([0, 0, 1, 2, 10, 11, 30]))
    return Drawn(
        start,
        start + draw(st.sampled_from([0, 1, 10, 10, 20, 31, 300])),
        draw(st.sampled_from([None, "m1", "m2"])),
        draw(st.sampled_from([None, "r1", "r2"])),
        draw(st.sampled_from([None, 5, 6, 7, 8])),
        draw(st.sampled_from([None, 10, 11])),
        draw(st.sampled_from(["sdk", "otel"])),
        draw(st.sampled_from([False, False, True])),
    )


def oracle_timed_as_one(a: Drawn, b: Drawn) -> bool:
    """Start within the start slack, the later before the earlier ends, and end at most the end slack after it."""
    first, second = sorted((a, b), key=lambda s: (s.start, s.end))
    share = (1 - ALMOST_ENTIRELY) * max(a.end - a.start, b.end - b.start)
    return (
        second.start - first.start <= max(TWIN_START_SLACK_MS, share)
        and second.start <= first.end
        and second.end - first.end <= max(TWIN_END_SLACK_MS, share)
    )


def oracle_same(a: Drawn, b: Drawn) -> bool:
    """The definition, read plainly (docs: "How two instrumentations of one call are counted")."""
    overlap = min(a.end, b.end) - max(a.start, b.start)
    if a.under_agent != b.under_agent:  # not siblings: written in two contexts, two calls
        return False
    if a.scope == b.scope:  # one instrumentation never writes one call twice
        return False
    if a.model is None and b.model is None:
        return False
    if a.model is None or b.model is None:  # a span naming nothing, within one that names a model
        anonymous = a if a.model is None else b
        length = anonymous.end - anonymous.start
        return overlap >= ALMOST_ENTIRELY * length if length > 0 else overlap >= 0
    if a.model != b.model or not oracle_timed_as_one(a, b):
        return False
    if a.response_id is not None and b.response_id is not None:  # the provider's id decides
        return a.response_id == b.response_id
    if (
        a.output_tokens is not None
        and b.output_tokens is not None
        and abs(a.output_tokens - b.output_tokens) > TOKEN_SLACK
    ):
        return False
    supporting = [(a.output_tokens, b.output_tokens), (a.input_tokens, b.input_tokens)]
    return any(x is not None and x == y for x, y in supporting)


def oracle_groups(spans: list[Drawn]) -> int:
    """Connected groups of the same-operation relation, by search over every pair."""
    seen: set[int] = set()
    groups = 0
    for first in range(len(spans)):
        if first in seen:
            continue
        groups += 1
        todo = [first]
        seen.add(first)
        while todo:
            i = todo.pop()
            for j in range(len(spans)):
                if j not in seen and oracle_same(spans[i], spans[j]):
                    seen.add(j)
                    todo.append(j)
    return groups


def union_ms(spans: list[Drawn]) -> float:
    covered = 0
    last = None
    for start, end in sorted((s.start, s.end) for s in spans):
        if last is None or start > last:
            covered += end - start
            last = end
        elif end > last:
            covered += end - last
            last = end
    return float(covered)


@settings(max_examples=200, deadline=None)
@given(st.lists(drawn(), min_size=1, max_size=7))
def test_model_calls_are_the_groups_of_the_same_operation_and_the_union_keeps_every_span(spans: list[Drawn]) -> None:
    """Count = the oracle's groups; actual_ms = the union of every span; busy_ms never counts a twin twice."""
    p = pipeline("version: 1\ntotal_ms: 60000\n")
    root = p.start("request", 0)
    agent = p.start("agent", 0, parent=root)
    for i, span in enumerate(spans):
        context = trace.set_span_in_context(agent if span.under_agent else root)
        tracer = p.provider.get_tracer(span.scope)
        started = tracer.start_span(
            f"call {i}", context=context, attributes=span.attributes(), start_time=at(span.start)
        )  # type: ignore[arg-type]
        started.end(end_time=at(span.end))
    agent.end(end_time=at(400))
    root.end(end_time=at(400))
    attributes = dict(p.span("request").attributes or {})
    assert attributes[attr.stage_key("model_call", "count")] == oracle_groups(spans)
    assert attributes[attr.stage_key("model_call", "actual_ms")] == union_ms(spans)
    assert attributes[attr.stage_key("model_call", "busy_ms")] <= sum(s.end - s.start for s in spans)
