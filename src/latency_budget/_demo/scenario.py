"""The simulated support assistant: what one request does, and how long each step takes.

:func:`plan_request` turns a seed and a request number into a tree of
:class:`PlannedSpan` values with times relative to the request's start. Nothing sleeps:
the emitter later replays the plan as real OpenTelemetry spans with explicit timestamps.

A request is an HTTP server span around an agent run: an input guardrail, a query
embedding, a semantic-cache lookup (a hit answers from the cache and skips the model),
a vector search, then an agent loop of model calls. Every call but the last plans tool
calls, which the model asks for either all at once (run in parallel) or one at a time
(run one after another). The last call streams the answer and records its time to first
chunk. An output guardrail closes the request. Attribute names follow the OpenTelemetry
GenAI semantic conventions; ``app.*`` attributes are the application's own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from latency_budget._demo.latency import Latency

__all__ = ["APP_SCOPE", "GENAI_SCOPE", "PlannedRequest", "PlannedSpan", "RequestInfo", "ToolMode", "plan_request"]

APP_SCOPE = "support_assistant"
GENAI_SCOPE = "opentelemetry.instrumentation.openai_v2"

ToolMode = Literal["none", "parallel", "sequential"]

CHAT_MODEL = "gpt-4o-mini"
CHAT_RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
EMBEDDING_MODEL = "text-embedding-3-small"
PROVIDER = "openai"
KNOWLEDGE_BASE = "support-kb"

# Step latencies. Medians and tails are in the range public provider and vector-store
# benchmarks report; the tails are what make some requests break their budgets.
REQUEST_PARSE = Latency(2.0, 0.3)
RESPONSE_WRITE = Latency(1.5, 0.3)
INPUT_GUARDRAIL = Latency(38, 0.35, tail_p=0.03, tail_factor=3.0)
OUTPUT_GUARDRAIL = Latency(45, 0.35, tail_p=0.03, tail_factor=3.0)
EMBEDDING = Latency(42, 0.3, tail_p=0.04, tail_factor=4.0)
CACHE_LOOKUP = Latency(5, 0.4, tail_p=0.02, tail_factor=6.0)
VECTOR_SEARCH = Latency(55, 0.4, tail_p=0.04, tail_factor=3.5)
PLANNING_CALL = Latency(520, 0.3, tail_p=0.03, tail_factor=2.5)  # a non-streamed call that returns tool calls
FIRST_CHUNK = Latency(380, 0.35, tail_p=0.04, tail_factor=2.2)  # streamed answer: time to first chunk
GAP = Latency(0.4, 0.5, floor_ms=0.05)  # our own code between two steps
TOOLS: dict[str, Latency] = {
    "lookup_order": Latency(110, 0.45, tail_p=0.04, tail_factor=4.0),
    "get_shipping_status": Latency(210, 0.5, tail_p=0.05, tail_factor=3.5),
    "search_help_center": Latency(85, 0.35, tail_p=0.02, tail_factor=3.0),
    "check_account_status": Latency(70, 0.35, tail_p=0.02, tail_factor=3.0),
    "create_support_ticket": Latency(240, 0.4, tail_p=0.03, tail_factor=3.0),
}

CACHE_HIT_RATE = 0.15
VOICE_SHARE = 0.2
PARALLEL_TOOLS_SHARE = 0.5
# How many model calls the agent loop makes (the last one answers).
MODEL_CALLS = (1, 2, 3, 4, 5)
MODEL_CALL_WEIGHTS = (0.32, 0.44, 0.16, 0.055, 0.025)
TIERS = ("free", "pro", "enterprise")
TIER_WEIGHTS = (0.55, 0.35, 0.10)


@dataclass(slots=True)
class PlannedSpan:
    """A span to emit; ``start_ns`` and ``end_ns`` are offsets from the request's start."""

    name: str
    start_ns: int
    end_ns: int
    kind: SpanKind = SpanKind.INTERNAL
    scope: str = APP_SCOPE
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    children: list[PlannedSpan] = field(default_factory=list)

    def walk(self) -> list[PlannedSpan]:
        """This span and all its descendants, parents before children."""
        found = [self]
        for child in self.children:
            found.extend(child.walk())
        return found


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What kind of request a plan is, without its spans (cheap to keep for a long run)."""

    index: int
    channel: str
    cache_hit: bool
    model_calls: int
    tool_mode: ToolMode
    tool_calls: int
    span_count: int
    duration_ns: int

    def describe(self) -> str:
        """A few words for people: ``voice, cache miss, 3 model calls, 2 tool calls in parallel``."""
        if self.cache_hit:
            return f"{self.channel}, cache hit (no model call)"
        calls = f"{self.model_calls} model call{'s' if self.model_calls != 1 else ''}"
        if self.tool_mode == "none":
            return f"{self.channel}, cache miss, {calls}, no tools"
        tools = f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}"
        how = "in parallel" if self.tool_mode == "parallel" else "one after another"
        return f"{self.channel}, cache miss, {calls}, {tools} {how}"


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One simulated request: its span tree and what kind of request it is."""

    root: PlannedSpan
    info: RequestInfo


class _Timeline:
    """Lays steps out one after another from a cursor, with a little of our own code between."""

    def __init__(self, rng: random.Random, start_ns: int) -> None:
        self.rng = rng
        self.now = start_ns

    def step(self, parent: PlannedSpan, name: str, duration_ns: int, **options: object) -> PlannedSpan:
        span = PlannedSpan(name, self.now, self.now + duration_ns, **options)  # type: ignore[arg-type]
        parent.children.append(span)
        self.now = span.end_ns + GAP.sample_ns(self.rng)
        return span


def _hex_id(rng: random.Random, prefix: str, bits: int = 64) -> str:
    return f"{prefix}{rng.getrandbits(bits):0{bits // 4}x}"


def plan_request(seed: int, index: int) -> PlannedRequest:
    """The plan of request number ``index`` of a run seeded with ``seed``; the same every time."""
    rng = random.Random(f"latency-budget-demo/{seed}/{index}")
    channel = "voice" if rng.random() < VOICE_SHARE else "chat"
    tier = rng.choices(TIERS, TIER_WEIGHTS)[0]
    root = PlannedSpan(
        "POST /v1/support/chat",
        0,
        0,
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": "POST",
            "http.route": "/v1/support/chat",
            "url.path": "/v1/support/chat",
            "url.scheme": "https",
            "app.channel": channel,
            "app.customer.tier": tier,
        },
    )
    time = _Timeline(rng, REQUEST_PARSE.sample_ns(rng))
    agent = PlannedSpan(
        "invoke_agent support-assistant",
        time.now,
        0,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support-assistant",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.conversation.id": _hex_id(rng, "conv_"),
        },
    )
    root.children.append(agent)

    question_tokens = rng.randint(12, 90)
    time.step(
        agent,
        "guardrail input_moderation",
        INPUT_GUARDRAIL.sample_ns(rng),
        attributes={
            "app.pipeline.step": "guardrail",
            "app.guardrail.name": "input_moderation",
            "app.guardrail.outcome": "pass",
        },
    )
    time.step(
        agent,
        f"embeddings {EMBEDDING_MODEL}",
        EMBEDDING.sample_ns(rng),
        kind=SpanKind.CLIENT,
        scope=GENAI_SCOPE,
        attributes={
            "gen_ai.operation.name": "embeddings",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": EMBEDDING_MODEL,
            "gen_ai.response.model": EMBEDDING_MODEL,
            "gen_ai.usage.input_tokens": question_tokens,
            "gen_ai.embeddings.dimension.count": 1536,
            "server.address": "api.openai.com",
        },
    )
    cache_hit = rng.random() < CACHE_HIT_RATE
    time.step(
        agent,
        "cache.lookup semantic-cache",
        CACHE_LOOKUP.sample_ns(rng),
        attributes={"app.pipeline.step": "cache", "app.cache.hit": cache_hit},
    )

    model_calls = tool_calls = 0
    tool_mode: ToolMode = "none"
    if not cache_hit:
        documents = rng.randint(4, 10)
        time.step(
            agent,
            f"retrieval {KNOWLEDGE_BASE}",
            VECTOR_SEARCH.sample_ns(rng),
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": KNOWLEDGE_BASE,
                "db.system.name": "qdrant",
                "db.collection.name": KNOWLEDGE_BASE,
                "app.retrieval.documents": documents,
            },
        )
        model_calls = rng.choices(MODEL_CALLS, MODEL_CALL_WEIGHTS)[0]
        if model_calls > 1:
            tool_mode = "parallel" if rng.random() < PARALLEL_TOOLS_SHARE else "sequential"
        context_tokens = 650 + question_tokens + documents * rng.randint(140, 220)
        for call in range(model_calls):
            if call < model_calls - 1:
                context_tokens += _planning_call(time, agent, context_tokens)
                ran = _tool_calls(time, agent, tool_mode)
                tool_calls += ran
                context_tokens += ran * rng.randint(80, 260)
            else:
                _answer_call(time, agent, context_tokens, channel)
        time.step(
            agent,
            "guardrail output_policy",
            OUTPUT_GUARDRAIL.sample_ns(rng),
            attributes={
                "app.pipeline.step": "guardrail",
                "app.guardrail.name": "output_policy",
                "app.guardrail.outcome": "pass",
            },
        )
    agent.end_ns = time.now
    root.end_ns = agent.end_ns + RESPONSE_WRITE.sample_ns(rng)
    root.attributes["http.response.status_code"] = 200
    root.attributes["app.cache.hit"] = cache_hit
    info = RequestInfo(
        index=index,
        channel=channel,
        cache_hit=cache_hit,
        model_calls=model_calls,
        tool_mode=tool_mode,
        tool_calls=tool_calls,
        span_count=len(root.walk()),
        duration_ns=root.end_ns - root.start_ns,
    )
    return PlannedRequest(root, info)


def _chat_attributes(
    rng: random.Random, input_tokens: int, output_tokens: int, finish: str
) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": CHAT_MODEL,
        "gen_ai.response.model": CHAT_RESPONSE_MODEL,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 512,
        "gen_ai.response.id": _hex_id(rng, "chatcmpl-", 96),
        "gen_ai.response.finish_reasons": (finish,),
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "server.address": "api.openai.com",
    }


def _planning_call(time: _Timeline, agent: PlannedSpan, input_tokens: int) -> int:
    """A model call that answers with tool calls; returns the tokens it adds to the context."""
    rng = time.rng
    output_tokens = rng.randint(18, 70)
    time.step(
        agent,
        f"chat {CHAT_MODEL}",
        PLANNING_CALL.sample_ns(rng),
        kind=SpanKind.CLIENT,
        scope=GENAI_SCOPE,
        attributes=_chat_attributes(rng, input_tokens, output_tokens, "tool_calls"),
    )
    return output_tokens


def _answer_call(time: _Timeline, agent: PlannedSpan, input_tokens: int, channel: str) -> None:
    """The final, streamed model call; it records its time to first chunk in seconds."""
    rng = time.rng
    output_tokens = rng.randint(30, 120) if channel == "voice" else rng.randint(80, 260)
    tokens_per_second = max(45.0, rng.gauss(115.0, 18.0))
    first_chunk_ns = FIRST_CHUNK.sample_ns(rng)
    duration_ns = first_chunk_ns + round(output_tokens / tokens_per_second * 1e9)
    attributes = _chat_attributes(rng, input_tokens, output_tokens, "stop")
    attributes["gen_ai.response.time_to_first_chunk"] = first_chunk_ns / 1e9
    time.step(agent, f"chat {CHAT_MODEL}", duration_ns, kind=SpanKind.CLIENT, scope=GENAI_SCOPE, attributes=attributes)


def _tool_calls(time: _Timeline, agent: PlannedSpan, mode: ToolMode) -> int:
    """The tool calls the model asked for: all at once in parallel, or one after another."""
    rng = time.rng
    count = rng.choices((1, 2, 3), (0.25, 0.5, 0.25) if mode == "parallel" else (0.5, 0.35, 0.15))[0]
    names = rng.sample(sorted(TOOLS), count)
    start = time.now
    ends = []
    for name in names:
        duration = TOOLS[name].sample_ns(rng)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": _hex_id(rng, "call_", 96),
        }
        if mode == "parallel":
            # Started together (a few microseconds apart, as a task group starts them).
            offset = rng.randint(0, 40) * 1_000
            span = PlannedSpan(f"execute_tool {name}", start + offset, start + offset + duration, attributes=attributes)
            agent.children.append(span)
            ends.append(span.end_ns)
        else:
            time.step(agent, f"execute_tool {name}", duration, attributes=attributes)
    if ends:
        time.now = max(ends) + GAP.sample_ns(rng)
    return count
