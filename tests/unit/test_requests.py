"""Requests only: local roots the budget file's `requests` rules exclude pass through untouched, everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.util._once import Once

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.testing import assert_within_budget

from .helpers import Pipeline, at, op, pipeline

REQUESTS_YAML = """
version: 1
requests: {kind: server}
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200}
"""


def remote_parent(trace_id: int, span_id: int) -> trace.Span:
    return NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)))


def untouched(p: Pipeline, spans: list[trace.Span]) -> bool:
    """Whether each of ``spans`` was exported as the very object the SDK handed over, with no label of ours."""
    ids = {s.get_span_context().span_id for s in spans}
    exported = [s for s in p.finished() if s.context is not None and s.context.span_id in ids]
    return len(exported) == len(ids) and all(
        p.passed_untouched(s) and not any(key.startswith("latency_budget.") for key in s.attributes or {})
        for s in exported
    )


def indexing(p: Pipeline, start: float, parent: trace.Span | None = None) -> list[trace.Span]:
    """Background work: an embedding batch (a retrieval span, over budget) under an INTERNAL root."""
    root = p.start("SentenceSplitter.__call__", start, parent=parent, kind=SpanKind.INTERNAL)
    embed = p.start("get_text_embedding_batch", start + 1, parent=root, attributes=op("embeddings"))
    embed.end(end_time=at(start + 300))
    root.end(end_time=at(start + 301))
    return [root, embed]


def test_a_root_that_is_not_a_request_passes_through_untouched_and_unjudged() -> None:
    """With `requests: {kind: server}`, an INTERNAL root and its spans: no label, no copy, no report."""
    p = pipeline(REQUESTS_YAML)
    background = indexing(p, 0)
    request = p.start("POST /answer", 0, kind=SpanKind.SERVER)
    p.run("chat", 10, 900, parent=request, attributes=op("chat"))
    request.end(end_time=at(1_000))
    assert untouched(p, background)
    assert [r.root_name for r in p.reports] == ["POST /answer"]
    assert dict(p.span("POST /answer").attributes or {})[attr.OVER_BUDGET_STAGES] == ("model_call",)
    assert p.processor.stats().active_traces == 0
    assert p.processor.stats().reports == 1


def test_without_requests_start_up_work_is_left_alone() -> None:
    """No `requests` key: an INTERNAL root with only an embedding batch (indexing) is not judged."""
    p = pipeline()
    indexing(p, 0)
    assert p.reports == []
    assert not any(attr.VIOLATED in (s.attributes or {}) for s in p.finished() if s.parent is None)


def test_requests_all_judges_every_local_root() -> None:
    """`requests: all` widens the default back to every local root: the indexing root is judged."""
    p = pipeline("version: 1\nrequests: all\nstages:\n  retrieval: {budget_ms: 100}\n  model_call: {budget_ms: 800}\n")
    indexing(p, 0)
    assert [r.root_name for r in p.reports] == ["SentenceSplitter.__call__"]
    assert p.reports[0].over_budget_stages == ("retrieval",)


def _plain_root(p: Pipeline, start: float, **root: Any) -> None:
    """A local root at ``start`` with one embedding call, started with ``root``'s name, kind, parent, attributes.

    An embedding is no model or tool call: whether the root is judged is its own properties' doing.
    """
    span = p.start(root.pop("name", "run"), start, **root)
    p.run("embed", start + 1, start + 5, parent=span, attributes=op("embeddings"))
    span.end(end_time=at(start + 10))


@pytest.mark.parametrize(
    ("root", "judged"),
    [
        ({"kind": SpanKind.SERVER}, True),
        ({"kind": SpanKind.CONSUMER}, True),
        ({"kind": SpanKind.INTERNAL, "parent": remote_parent(0xABC, 7)}, True),
        ({"kind": SpanKind.INTERNAL, "attributes": op("invoke_agent")}, True),
        ({"kind": SpanKind.INTERNAL, "attributes": {"openinference.span.kind": "AGENT"}}, True),
        ({"kind": SpanKind.INTERNAL, "attributes": {"traceloop.span.kind": "workflow"}}, True),
        ({"kind": SpanKind.INTERNAL, "attributes": {"langfuse.observation.type": "agent"}}, True),
        ({"kind": SpanKind.INTERNAL, "attributes": op("create_agent")}, False),
        ({"kind": SpanKind.INTERNAL}, False),
        ({"kind": SpanKind.CLIENT}, False),
    ],
    ids=[
        "server",
        "consumer",
        "remote-parent",
        "invoke_agent",
        "AGENT",
        "workflow",
        "langfuse-agent",
        "create_agent",
        "internal",
        "client",
    ],
)
def test_the_default_judges_roots_that_are_plausibly_requests(root: dict[str, Any], judged: bool) -> None:
    """By default a root with only an embedding is judged as a server or consumer span, remote child or agent run."""
    p = pipeline()
    _plain_root(p, 0, **root)
    assert len(p.reports) == (1 if judged else 0)
    [exported] = [s for s in p.finished() if s.name == "run"]
    assert (attr.stage_key("retrieval", "count") in (exported.attributes or {})) is judged
    assert p.passed_untouched(exported) is not judged


def test_the_default_judges_a_plain_root_that_contains_a_model_call() -> None:
    """An INTERNAL root (a script's) is judged once it contains a model call, however deep; the replay agrees."""
    p = pipeline()
    run = p.start("main", 0, kind=SpanKind.INTERNAL)
    step = p.start("step", 1, parent=run)
    p.run("chat", 2, 40, parent=step, attributes=op("chat"))
    step.end(end_time=at(45))
    run.end(end_time=at(50))
    indexing(p, 100)
    assert [r.root_name for r in p.reports] == ["main"]
    assert evaluate_spans(p.processor.config, [record_of(s) for s in p.finished()]) == p.reports


def test_a_root_that_is_itself_a_model_call_is_judged() -> None:
    """A chat span with no span around it (a script calling the model directly) is a request by default."""
    p = pipeline()
    p.start("chat", 0, kind=SpanKind.CLIENT, attributes=op("chat")).end(end_time=at(30))
    assert [r.root_name for r in p.reports] == ["chat"]


def test_a_file_with_no_model_call_stage_judges_every_root() -> None:
    """With no `model_call` stage the default cannot tell a request: every local root is judged, as before."""
    p = pipeline("version: 1\nstages:\n  db: {budget_ms: 10, match: {name: 'SELECT *'}}\n")
    root = p.start("job", 0, kind=SpanKind.INTERNAL)
    p.run("SELECT 1", 1, 30, parent=root)
    root.end(end_time=at(40))
    assert [r.root_name for r in p.reports] == ["job"]
    assert p.reports[0].over_budget_stages == ("db",)


def test_background_root_in_a_traced_request_keeps_its_spans_out_of_the_request() -> None:
    """A non-request local root in the trace of an active request (a callback): its spans stay untouched and uncounted.

    The background root outlives the request, so its trace's account passes to it, and
    its later spans still pass through untouched.
    """
    p = pipeline(REQUESTS_YAML)
    request = p.start("POST /answer", 0, parent=remote_parent(0xABC, 1), kind=SpanKind.SERVER)
    background = p.start("consume job", 5, parent=remote_parent(0xABC, 2), kind=SpanKind.CONSUMER)
    early = p.start("embed early", 6, parent=background, attributes=op("embeddings"))
    p.run("chat", 10, 100, parent=request, attributes=op("chat"))
    early.end(end_time=at(50))
    request.end(end_time=at(100))
    late = p.start("embed late", 120, parent=background, attributes=op("embeddings"))
    late.end(end_time=at(400))
    background.end(end_time=at(401))
    attrs = dict(p.span("POST /answer").attributes or {})
    assert attrs[attr.stage_key("model_call", "count")] == 1
    assert attr.stage_key("retrieval", "count") not in attrs
    assert untouched(p, [background, early, late])
    assert [r.root_name for r in p.reports] == ["POST /answer"]
    assert p.processor.stats().active_traces == 0


def test_a_request_after_a_background_root_of_its_trace_is_accounted() -> None:
    """A request root joining a trace whose background root is registered: the request's spans are its own."""
    p = pipeline(REQUESTS_YAML)
    first = p.start("POST /a", 0, parent=remote_parent(0xABC, 1), kind=SpanKind.SERVER)
    background = p.start("consume job", 1, parent=remote_parent(0xABC, 2), kind=SpanKind.CONSUMER)
    first.end(end_time=at(2))
    second = p.start("POST /b", 3, parent=remote_parent(0xABC, 3), kind=SpanKind.SERVER)
    job_step = p.start("embed", 4, parent=background, attributes=op("embeddings"))
    p.run("tool", 4, 20, parent=second, attributes=op("execute_tool"))
    job_step.end(end_time=at(30))
    second.end(end_time=at(40))
    background.end(end_time=at(50))
    attrs = dict(p.span("POST /b").attributes or {})
    assert attrs[attr.stage_key("tool_calls", "count")] == 1
    assert attr.stage_key("retrieval", "count") not in attrs
    assert untouched(p, [background, job_step])
    assert [r.root_name for r in p.reports] == ["POST /a", "POST /b"]


def test_requests_rules_may_be_a_list_and_match_names() -> None:
    """`requests: [{kind: server}, {name: 'query *'}]`: an INTERNAL `query` root is a request too."""
    p = pipeline(REQUESTS_YAML.replace("requests: {kind: server}", "requests: [{kind: server}, {name: 'query *'}]"))
    root = p.start("query docs", 0, kind=SpanKind.INTERNAL)
    p.run("retrieve", 0, 50, parent=root, attributes=op("retrieval"))
    root.end(end_time=at(60))
    indexing(p, 100)
    assert [r.root_name for r in p.reports] == ["query docs"]


# -- the same rule in replay and in latency_budget.testing -------------------------------------------


@settings(max_examples=60, deadline=None, database=None)
@given(
    roots=st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(1, 400)), min_size=1, max_size=5),
    rule=st.sampled_from(["{kind: server}", "{name: 'POST *'}", "[{kind: consumer}, {kind: server}]"]),
)
def test_replay_honours_requests_as_the_live_processor_does(roots: list[tuple[bool, int, int]], rule: str) -> None:
    """Random server and internal roots: replay reports exactly the live processor's requests, nothing else."""
    p = pipeline(REQUESTS_YAML.replace("{kind: server}", rule))
    for n, (server, children, length) in enumerate(roots):
        kind = SpanKind.SERVER if server else SpanKind.INTERNAL
        root = p.start(f"POST /{n}" if server else f"job {n}", n * 1000, kind=kind)
        for c in range(children):
            p.run(f"chat {n}.{c}", n * 1000 + c, n * 1000 + c + length, parent=root, attributes=op("chat"))
        root.end(end_time=at(n * 1000 + length + children))
    config = p.processor.config
    assert evaluate_spans(config, [record_of(s) for s in p.finished()]) == p.reports
    assert len(p.reports) == sum(1 for server, _, _ in roots if server)
    everything = evaluate_spans(config, [record_of(s) for s in p.finished()], every_root=True)
    assert len(everything) == len(roots)


@pytest.fixture
def no_global_provider() -> Iterator[None]:
    """No global tracer provider during the test; the suite's comes back afterwards."""
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    yield
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def background_then_query(tracer: trace.Tracer) -> None:
    """Indexing outside any request (slow embeddings), then a query whose retrieval is fast."""
    index = tracer.start_span("SentenceSplitter.__call__", start_time=at(0))
    context = trace.set_span_in_context(index)
    tracer.start_span("embed batch", context=context, attributes=op("embeddings"), start_time=at(0)).end(
        end_time=at(500)
    )
    index.end(end_time=at(500))
    query = tracer.start_span("query docs", start_time=at(600))
    context = trace.set_span_in_context(query)
    tracer.start_span("retrieve", context=context, attributes=op("retrieval"), start_time=at(600)).end(end_time=at(650))
    query.end(end_time=at(660))


@pytest.mark.usefixtures("no_global_provider")
def test_testing_block_leaves_background_roots_out() -> None:
    """In a block, a root `requests` excludes is left out with its spans: the query alone is the request."""
    config = load_budgets(text="version: 1\nrequests: {name: 'query *'}\nstages: {retrieval: {budget_ms: 100}}\n")
    with assert_within_budget(config) as result:
        background_then_query(trace.get_tracer("app"))
    assert result.report.root_name == "query docs"
    assert result.report.stage("retrieval").actual_ms == 50.0
    assert result.report.total_actual_ms == 60.0


@pytest.mark.usefixtures("no_global_provider")
def test_testing_block_with_no_request_judges_the_whole_block() -> None:
    """When no root in the block is a request, the block itself is the request, background included."""
    config = load_budgets(text="version: 1\nrequests: {kind: server}\nstages: {retrieval: {budget_ms: 100}}\n")
    with pytest.raises(AssertionError, match="latency budget exceeded: retrieval"), assert_within_budget(config):
        background_then_query(trace.get_tracer("app"))
