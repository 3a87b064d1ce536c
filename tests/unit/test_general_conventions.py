"""Recognition from the general conventions, below the dialects (issue 45, items 1, 5 and 6).

Each test rebuilds spans with the attribute shapes the named instrumentation writes (read in
its source, or printed by the installed package), through a real pipeline with no ``match``
rules, and checks stages, counts and which roots are judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget._config.genai_defaults import DIALECTS, EVIDENCE_CLASSES, MODEL_HOSTS_ENV, _hosts_from_env
from latency_budget._config.matching import UrlMatch

from .helpers import Pipeline, at, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"


def _span(
    p: Pipeline,
    name: str,
    start: float,
    end: float,
    parent: trace.Span | None,
    attributes: Mapping[str, object],
    kind: SpanKind = SpanKind.INTERNAL,
    scope: str = "test",
) -> trace.Span:
    context = trace.set_span_in_context(parent) if parent is not None else None
    span = p.provider.get_tracer(scope).start_span(
        name,
        context=context,
        attributes=attributes,
        start_time=at(start),
        kind=kind,  # type: ignore[arg-type]
    )
    if end >= 0:
        span.end(end_time=at(end))
    return span


def _counts(p: Pipeline, root: str = "request") -> dict[str, int]:
    attributes = dict(p.span(root).attributes or {})
    return {
        stage: attributes[attr.stage_key(stage, "count")]
        for stage in ("retrieval", "model_call", "tool_calls")
        if attr.stage_key(stage, "count") in attributes
    }


def _stage(p: Pipeline, name: str) -> object:
    return (p.span(name).attributes or {}).get(attr.STAGE)


# -- database conventions: vector search is retrieval ------------------------------------------


def test_qdrant_searches_are_retrieval_and_its_writes_are_not() -> None:
    """OpenLLMetry's opentelemetry-instrumentation-qdrant (wrapper.py): CLIENT `qdrant.{method}`, `db.system` `Qdrant`.

    A search and a query (which adds `db.vector.query.top_k`) are two retrievals; an upsert in the
    same request is a write, in no stage.
    """
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    client = SpanKind.CLIENT
    _span(p, "qdrant.search", 5, 15, root, {"db.system": "Qdrant", "qdrant.search.collection_name": "docs"}, client)
    query = {"db.system": "Qdrant", "qdrant.query_points.collection_name": "docs", "db.vector.query.top_k": 5}
    _span(p, "qdrant.query_points", 20, 30, root, query, client)
    upsert = {"db.system": "Qdrant", "qdrant.upsert.collection_name": "docs", "qdrant.upsert.points_count": 3}
    _span(p, "qdrant.upsert", 35, 40, root, upsert, client)
    root.end(end_time=at(50))
    assert _stage(p, "qdrant.search") == "retrieval"
    assert _stage(p, "qdrant.upsert") is None
    assert _counts(p) == {"retrieval": 2}


def test_chroma_query_is_one_retrieval_with_its_segment_query_inside() -> None:
    """OpenLLMetry's opentelemetry-instrumentation-chromadb: `chroma.query` > `chroma.query.segment._query`.

    The inner segment query is part of the outer call (one call); `chroma.add` is a write.
    """
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    query = _span(p, "chroma.query", 5, -1, root, {"db.system": "chroma", "db.operation": "query"})
    segment = {"db.system": "chroma", "db.operation": "_query", "db.chroma.query.segment._query.collection_id": "c"}
    _span(p, "chroma.query.segment._query", 6, 14, query, segment)
    query.end(end_time=at(15))
    _span(p, "chroma.add", 20, 25, root, {"db.system": "chroma", "db.operation": "add"})
    root.end(end_time=at(30))
    assert _stage(p, "chroma.add") is None
    assert _counts(p) == {"retrieval": 1}


@pytest.mark.parametrize(
    ("name", "system", "stage"),
    [
        ("milvus.search", "milvus", "retrieval"),  # opentelemetry-instrumentation-milvus: db.system, db.operation
        ("milvus.insert", "milvus", None),
        ("lancedb.search", "lancedb", "retrieval"),  # opentelemetry-instrumentation-lancedb
        ("lancedb.delete", "lancedb", None),
        ("pinecone.query", "Pinecone", "retrieval"),  # opentelemetry-instrumentation-pinecone (CLIENT)
        ("pinecone.upsert", "Pinecone", None),
    ],
)
def test_vector_database_operations_by_system_and_span_name(name: str, system: str, stage: str | None) -> None:
    """OpenLLMetry's vector-database instrumentations: reads are retrieval, writes (by span name) are in no stage."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    _span(p, name, 5, 15, root, {"db.system": system, "db.operation": name.split(".", 1)[1]}, SpanKind.CLIENT)
    root.end(end_time=at(20))
    assert _stage(p, name) == stage


def test_database_semconv_system_name_of_a_vector_database_is_retrieval() -> None:
    """The current database conventions (`db.system.name`, span `{operation} {collection}`): a search is retrieval."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    search = {"db.system.name": "qdrant", "db.operation.name": "search", "db.collection.name": "docs"}
    _span(p, "search docs", 5, 15, root, search, SpanKind.CLIENT)
    _span(p, "upsert docs", 16, 18, root, {**search, "db.operation.name": "upsert"}, SpanKind.CLIENT)
    root.end(end_time=at(20))
    assert _counts(p) == {"retrieval": 1}


def test_a_relational_database_query_is_no_retrieval() -> None:
    """A PostgreSQL query (pgvector's too: nothing in its span says vector) stays in no stage."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    sql = {"db.system": "postgresql", "db.operation": "SELECT", "db.statement": "SELECT 1"}
    _span(p, "SELECT docs", 5, 15, root, sql, SpanKind.CLIENT)
    root.end(end_time=at(20))
    assert _counts(p) == {}


# -- MCP conventions: tools/call is a tool call ----------------------------------------------


def _mcp(method: str, tool: str | None = None) -> dict[str, object]:
    """An MCP client span's attributes as the OpenTelemetry MCP conventions give them (gen-ai/mcp.md)."""
    found: dict[str, object] = {
        "mcp.method.name": method,
        "mcp.session.id": "191c4850af6c49e08843a3f6c80e5046",
        "mcp.protocol.version": "2025-06-18",
        "network.transport": "pipe",
    }
    if tool is not None:
        found["gen_ai.tool.name"] = tool
        found["jsonrpc.request.id"] = "2"
    return found


def test_mcp_client_tool_calls_are_tool_calls_and_its_protocol_traffic_is_not() -> None:
    """MCP client spans (`tools/call {tool}`, CLIENT; `gen_ai.operation.name` is only recommended, so absent here).

    Two tool calls count two; `initialize` and `tools/list` are protocol bookkeeping, in no stage.
    """
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    _span(p, "initialize", 1, 3, root, _mcp("initialize"), SpanKind.CLIENT)
    _span(p, "tools/list", 3, 4, root, _mcp("tools/list"), SpanKind.CLIENT)
    _span(p, "tools/call get_weather", 10, 30, root, _mcp("tools/call", "get_weather"), SpanKind.CLIENT)
    _span(p, "tools/call search_docs", 12, 40, root, _mcp("tools/call", "search_docs"), SpanKind.CLIENT)
    root.end(end_time=at(50))
    assert _stage(p, "tools/list") is None
    assert _counts(p) == {"tool_calls": 2}


def test_mcp_server_span_in_the_servers_own_trace_is_its_tool_call() -> None:
    """The MCP server's span (SERVER, remote parent from `params._meta`) roots a request of one tool call."""
    p = pipeline(NO_MATCH_RULES)
    remote = trace.NonRecordingSpan(
        trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    )
    server = _span(p, "tools/call get_weather", 0, -1, remote, _mcp("tools/call", "get_weather"), SpanKind.SERVER)
    server.end(end_time=at(20))
    assert _counts(p, "tools/call get_weather") == {"tool_calls": 1}


def test_mcp_client_span_inside_the_frameworks_tool_span_is_one_tool_call() -> None:
    """A framework's `execute_tool` around the MCP client's `tools/call`: one tool call (nested)."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    tool = _span(p, "execute_tool get_weather", 5, -1, root, {"gen_ai.operation.name": "execute_tool"})
    _span(p, "tools/call get_weather", 6, 29, tool, _mcp("tools/call", "get_weather"), SpanKind.CLIENT)
    tool.end(end_time=at(30))
    root.end(end_time=at(40))
    assert _counts(p) == {"tool_calls": 1}


# -- HTTP client spans to a model provider's API ---------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "stage"),
    [
        # opentelemetry-instrumentation-requests 0.66b2, default (old) HTTP conventions: method and URL only
        ({"http.method": "POST", "http.url": "https://api.anthropic.com/v1/messages"}, "model_call"),
        # ... with OTEL_SEMCONV_STABILITY_OPT_IN=http
        (
            {
                "http.request.method": "POST",
                "url.full": "https://api.openai.com/v1/chat/completions",
                "server.address": "api.openai.com",
            },
            "model_call",
        ),
        ({"http.method": "POST", "http.url": "https://api.openai.com/v1/embeddings"}, "retrieval"),
        ({"http.method": "GET", "http.url": "https://api.openai.com/v1/models"}, None),
        ({"http.method": "POST", "http.url": "https://api.openai.com/v1/files"}, None),
        # an LLM proxy or a local server: the OpenAI-compatible path on any host
        ({"http.method": "POST", "http.url": "http://127.0.0.1:4000/v1/chat/completions?x=1"}, "model_call"),
        (
            {
                "http.method": "POST",
                "http.url": "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-v2/converse-stream",
            },
            "model_call",
        ),
        (
            {
                "http.method": "POST",
                "http.url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent",
            },
            "model_call",
        ),
        ({"http.method": "POST", "http.url": "https://example.com/v2/messages"}, None),
        ({"http.method": "POST", "http.url": "https://shop.example.com/chat/completions"}, None),
    ],
)
def test_http_client_spans_to_model_providers(attributes: dict[str, object], stage: str | None) -> None:
    """A POST to a provider's model route is a model call (embeddings: retrieval); other requests are in no stage."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    _span(p, "POST", 5, 15, root, attributes, SpanKind.CLIENT)
    root.end(end_time=at(20))
    assert _stage(p, "POST") == stage


def test_http_span_under_a_genai_span_is_part_of_that_call() -> None:
    """openai-v2's `chat` span around the `POST` the client made (and its retry): one model call."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    chat = _span(p, "chat gpt-4o", 5, -1, root, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"})
    post = {"http.method": "POST", "http.url": "https://api.openai.com/v1/chat/completions"}
    _span(p, "POST", 6, 10, chat, {**post, "http.status_code": 429}, SpanKind.CLIENT)
    _span(p, "POST", 12, 40, chat, {**post, "http.status_code": 200}, SpanKind.CLIENT)
    chat.end(end_time=at(41))
    root.end(end_time=at(50))
    assert _counts(p) == {"model_call": 1}


def test_a_root_holding_only_an_http_model_call_is_a_request() -> None:
    """An INTERNAL root whose only model call is an uninstrumented client's HTTP span is judged, with one model call."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("answer", 0, kind=SpanKind.INTERNAL)
    post = {"http.method": "POST", "http.url": "https://api.anthropic.com/v1/messages"}
    _span(p, "POST", 5, 15, root, post, SpanKind.CLIENT)
    root.end(end_time=at(20))
    assert _counts(p, "answer") == {"model_call": 1}


# -- framework's own keys: Haystack components by their class names ---------------------------


@pytest.mark.parametrize(
    ("component", "stage"),
    [
        ("QdrantEmbeddingRetriever", "retrieval"),  # qdrant-haystack
        ("ChromaQueryTextRetriever", "retrieval"),  # chroma-haystack
        ("MistralTextEmbedder", "retrieval"),
        ("CohereRanker", "retrieval"),
        ("MistralChatGenerator", "model_call"),  # mistral-haystack
        ("AmazonBedrockGenerator", "model_call"),
        ("ChatPromptBuilder", None),
        ("DocumentWriter", None),
    ],
)
def test_haystack_integration_components_are_staged_by_their_class_name(component: str, stage: str | None) -> None:
    """haystack-ai's tracer writes `haystack.component.type` (the class name): integrations' retrievers count too."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    keys = {"haystack.component.name": "c", "haystack.component.type": component}
    _span(p, "haystack.component.run", 5, 15, root, keys, scope="haystack")
    root.end(end_time=at(20))
    assert _stage(p, "haystack.component.run") == stage


def test_model_hosts_from_the_environment_take_the_openai_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    """LATENCY_BUDGET_MODEL_HOSTS names a gateway's hosts (globs too); a bad glob is skipped, not fatal."""
    monkeypatch.setenv(MODEL_HOSTS_ENV, " LLM.internal , *.gw.example ,[bad, ")
    hosts = _hosts_from_env()
    assert hosts == ("llm.internal", "*.gw.example")
    match = UrlMatch(tuple((host, ("/chat/completions",)) for host in hosts))
    assert match.holds({"http.method": "POST", "http.url": "https://llm.internal:8443/openai/chat/completions"})
    assert match.holds({"http.request.method": "POST", "url.full": "https://eu.gw.example/x/chat/completions"})
    assert not match.holds({"http.method": "POST", "http.url": "https://other.example/x/chat/completions"})
    assert not match.holds({"http.method": "POST", "http.url": ["https://llm.internal/chat/completions"]})


def test_every_dialect_row_says_its_evidence_class() -> None:
    """Each row of DIALECTS names one evidence class, and so does each row of the README's dialect table."""
    assert all(dialect.evidence_class in EVIDENCE_CLASSES for dialect in DIALECTS)
    assert {"database semconv", "MCP semconv", "HTTP client"} <= {dialect.evidence_class for dialect in DIALECTS}
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Dialects: what each framework emits", 1)[1].split("**Which frameworks.**", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    assert rows
    assert [row for row in rows if "evidence class:" not in row.rsplit("|", 2)[1]] == []
