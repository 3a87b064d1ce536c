"""The simulated support assistant: what one request does, and how long each step takes.

:func:`plan_request` turns a seed and a request number into a tree of
:class:`PlannedSpan` values with times relative to the request's start. Nothing sleeps:
the emitter later replays the plan as real OpenTelemetry spans with explicit timestamps.

A request is an HTTP server span around an agent run: an input guardrail, a query
embedding, a semantic-cache lookup (a hit answers from the cache and skips the model),
a vector search, then an agent loop of model calls. Every call but the last plans tool
calls, which the model asks for either all at once (run in parallel) or one at a time
(run one after another). The last call streams the answer and records its time to first
chunk, except for the legacy web client, which waits for the whole answer. An output
guardrail closes the request. Attribute names follow the OpenTelemetry GenAI semantic
conventions; ``app.*`` attributes are the application's own.

Every latency lever shows in some requests and not in others: questions come from a
pool, so some repeat one asked before and the semantic cache can miss them (the
retrieval query and tool arguments are recorded); a later agent step may call a tool
again with the same arguments; enterprise customers (and some pro ones) get a larger,
slower model; the context grows with the documents retrieved, the conversation's
history and the tool results, and a model call's time to first token grows with it;
and answers vary in length, each output token taking the model's generation time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from latency_budget._core.wording import plural
from latency_budget._demo.latency import Latency

__all__ = [
    "APPLIED_LEVERS",
    "APP_SCOPE",
    "GENAI_SCOPE",
    "PlannedRequest",
    "PlannedSpan",
    "RequestInfo",
    "ToolMode",
    "plan_request",
]

APP_SCOPE = "support_assistant"
GENAI_SCOPE = "opentelemetry.instrumentation.openai_v2"

ToolMode = Literal["none", "parallel", "sequential"]

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
GAP = Latency(0.4, 0.5, floor_ms=0.05)  # our own code between two steps
TOOLS: dict[str, Latency] = {
    "lookup_order": Latency(110, 0.45, tail_p=0.04, tail_factor=4.0),
    "get_shipping_status": Latency(210, 0.5, tail_p=0.05, tail_factor=3.5),
    "search_help_center": Latency(85, 0.35, tail_p=0.02, tail_factor=3.0),
    "check_account_status": Latency(70, 0.35, tail_p=0.02, tail_factor=3.0),
    "create_support_ticket": Latency(240, 0.4, tail_p=0.03, tail_factor=3.0),
}


@dataclass(frozen=True, slots=True)
class ChatModel:
    """A chat model's speed: a first token after ``first_token`` plus ``prefill_ms`` per input token,
    then ``ms_per_token`` (spread ``token_spread``) per output token."""

    name: str
    response_model: str
    first_token: Latency
    prefill_ms: float
    ms_per_token: float
    token_spread: float = 0.15


SMALL_MODEL = ChatModel(
    "gpt-4o-mini", "gpt-4o-mini-2024-07-18", Latency(190, 0.22, tail_p=0.03, tail_factor=2.5), 0.06, 8.5
)
LARGE_MODEL = ChatModel("gpt-4o", "gpt-4o-2024-08-06", Latency(300, 0.22, tail_p=0.03, tail_factor=2.5), 0.1, 12.0)
# Who gets the large model: every enterprise customer and some pro ones.
LARGE_MODEL_SHARE = {"free": 0.0, "pro": 0.2, "enterprise": 1.0}

# Questions: some are about one order or account (never the same twice), the others come from a pool
# in which popular ones recur (Zipf-like weights), so a cache could answer the repeats.
QUESTIONS = (
    "where is my order",
    "how do i return an item",
    "my package says delivered but i cannot find it",
    "can i change my shipping address",
    "why was my card declined",
    "how do i reset my password",
    "do you ship internationally",
    "how long does a refund take",
    "can i cancel my subscription",
    "the item arrived damaged",
    "how do i update my payment method",
    "can i get an invoice for my order",
    "is there a warranty on this product",
    "my discount code does not work",
    "how do i contact a human agent",
    "can i order in bulk",
    "why is my account locked",
    "how do i delete my account",
    "the app keeps crashing on login",
    "can i pick up my order in store",
    "what are your opening hours",
    "how do i track a return",
    "i was charged twice",
    "can i exchange for another size",
)
QUESTION_WEIGHTS = tuple(1 / (rank + 1) for rank in range(len(QUESTIONS)))

PERSONAL_QUESTION_SHARE = 0.5
CACHE_HIT_RATE = 0.15
VOICE_SHARE = 0.2
LEGACY_CLIENT_SHARE = 0.2  # chat requests from the legacy web client, which does not stream answers
REPEAT_TOOL_SHARE = 0.3  # a later agent step calls a read-only tool again with the same arguments
READ_ONLY_TOOLS = frozenset({"lookup_order", "get_shipping_status", "check_account_status", "search_help_center"})
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
    model: str = SMALL_MODEL.name
    streamed: bool = True

    def describe(self) -> str:
        """A few words for people: ``voice, cache miss, 3 gpt-4o-mini calls, 2 tool calls in parallel``."""
        if self.cache_hit:
            return f"{self.channel}, cache hit (no model call)"
        calls = plural(self.model_calls, f"{self.model} call")
        answer = "" if self.streamed else ", answer not streamed"
        if self.tool_mode == "none":
            return f"{self.channel}, cache miss, {calls}, no tools{answer}"
        tools = plural(self.tool_calls, "tool call")
        how = "in parallel" if self.tool_mode == "parallel" else "one after another"
        return f"{self.channel}, cache miss, {calls}, {tools} {how}{answer}"


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


@dataclass(slots=True)
class _Agent:
    """What one request's agent loop knows: its model, client, question and ids for tool arguments."""

    model: ChatModel
    streams: bool
    question: str
    order_id: str
    account_id: str
    called: list[tuple[str, str]] = field(default_factory=list)  # (tool, arguments) so far


# The levers the demo can apply (``latency-budget demo --apply LEVER``), each with what it changes: a run
# with a lever applied draws the same requests as without it (the same random draws), changed only by it.
APPLIED_LEVERS: dict[str, str] = {
    "streaming": "every client streams its answers, the legacy web client too",
}


def plan_request(seed: int, index: int, applied: frozenset[str] = frozenset()) -> PlannedRequest:
    """The plan of request number ``index`` of a run seeded with ``seed``; the same every time.

    ``applied`` names levers of :data:`APPLIED_LEVERS` the simulated team has applied.
    """
    rng = random.Random(f"latency-budget-demo/{seed}/{index}")
    channel = "voice" if rng.random() < VOICE_SHARE else "chat"
    tier = rng.choices(TIERS, TIER_WEIGHTS)[0]
    client = "web-legacy" if channel == "chat" and rng.random() < LEGACY_CLIENT_SHARE else f"{channel}-app"
    question = rng.choices(QUESTIONS, QUESTION_WEIGHTS)[0]
    order_id = f"A-{rng.randint(10_000, 99_999)}"
    if rng.random() < PERSONAL_QUESTION_SHARE:
        question = f"{question} (order {order_id})"
    agent_state = _Agent(
        LARGE_MODEL if rng.random() < LARGE_MODEL_SHARE[tier] else SMALL_MODEL,
        client != "web-legacy" or "streaming" in applied,
        question,
        order_id,
        _hex_id(rng, "cus_", 32),
    )
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
            "app.client": client,
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

    question_tokens = 6 + 2 * len(question.split()) + rng.randint(0, 40)  # the question and its surrounding text
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
                "gen_ai.retrieval.query.text": question,
                "db.system.name": "qdrant",
                "db.collection.name": KNOWLEDGE_BASE,
                "app.retrieval.documents": documents,
            },
        )
        model_calls = rng.choices(MODEL_CALLS, MODEL_CALL_WEIGHTS)[0]
        if model_calls > 1:
            tool_mode = "parallel" if rng.random() < PARALLEL_TOOLS_SHARE else "sequential"
        # The system prompt, the conversation so far (none in a new one), the question, the documents.
        history = 0 if rng.random() < 0.55 else rng.randint(300, 4_000)
        context_tokens = 650 + history + question_tokens + documents * rng.randint(140, 260)
        for call in range(model_calls):
            if call < model_calls - 1:
                context_tokens += _planning_call(time, agent, agent_state, context_tokens)
                ran = _tool_calls(time, agent, agent_state, tool_mode)
                tool_calls += ran
                context_tokens += ran * rng.randint(80, 260)
            else:
                _answer_call(time, agent, agent_state, context_tokens, channel)
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
        model=agent_state.model.name,
        streamed=agent_state.streams,
    )
    return PlannedRequest(root, info)


def _chat_attributes(
    rng: random.Random, model: ChatModel, input_tokens: int, output_tokens: int, finish: str, stream: bool
) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": model.name,
        "gen_ai.response.model": model.response_model,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.request.stream": stream,
        "gen_ai.response.id": _hex_id(rng, "chatcmpl-", 96),
        "gen_ai.response.finish_reasons": (finish,),
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "server.address": "api.openai.com",
    }


def _model_time_ns(rng: random.Random, model: ChatModel, input_tokens: int, output_tokens: int) -> tuple[int, int]:
    """(time to first token, whole call) of a call: prefill grows with the input, decoding with the output."""
    first = model.first_token.sample_ms(rng) + model.prefill_ms * input_tokens * math.exp(rng.gauss(0.0, 0.15))
    decode = model.ms_per_token * output_tokens * math.exp(rng.gauss(0.0, model.token_spread))
    return round(first * 1e6), round((first + decode) * 1e6)


def _planning_call(time: _Timeline, agent: PlannedSpan, state: _Agent, input_tokens: int) -> int:
    """A non-streamed model call that answers with tool calls; returns the tokens it adds to the context."""
    rng = time.rng
    output_tokens = rng.randint(18, 70)
    _, duration_ns = _model_time_ns(rng, state.model, input_tokens, output_tokens)
    time.step(
        agent,
        f"chat {state.model.name}",
        duration_ns,
        kind=SpanKind.CLIENT,
        scope=GENAI_SCOPE,
        attributes=_chat_attributes(rng, state.model, input_tokens, output_tokens, "tool_calls", False),
    )
    return output_tokens


def _answer_call(time: _Timeline, agent: PlannedSpan, state: _Agent, input_tokens: int, channel: str) -> None:
    """The final model call; streamed, it records its time to first chunk in seconds."""
    rng = time.rng
    if channel == "voice":
        output_tokens = rng.randint(30, 120)
    elif rng.random() < 0.1:  # a detailed, step-by-step answer
        output_tokens = rng.randint(300, 500)
    else:
        output_tokens = rng.randint(80, 260)
    first_chunk_ns, duration_ns = _model_time_ns(rng, state.model, input_tokens, output_tokens)
    attributes = _chat_attributes(rng, state.model, input_tokens, output_tokens, "stop", state.streams)
    if state.streams:
        attributes["gen_ai.response.time_to_first_chunk"] = first_chunk_ns / 1e9
    time.step(
        agent, f"chat {state.model.name}", duration_ns, kind=SpanKind.CLIENT, scope=GENAI_SCOPE, attributes=attributes
    )


def _tool_arguments(name: str, state: _Agent) -> str:
    """The JSON arguments the model passes to a tool (what makes two calls identical)."""
    if name in ("lookup_order", "get_shipping_status"):
        return f'{{"order_id": "{state.order_id}"}}'
    if name == "search_help_center":
        return f'{{"query": "{state.question}"}}'
    if name == "check_account_status":
        return f'{{"account_id": "{state.account_id}"}}'
    # A ticket is created, not looked up: each call is a new one.
    return f'{{"account_id": "{state.account_id}", "summary": "{state.question}", "attempt": {len(state.called)}}}'


def _tool_calls(time: _Timeline, agent: PlannedSpan, state: _Agent, mode: ToolMode) -> int:
    """The tool calls the model asked for: all at once in parallel, or one after another.

    Now and then the model asks again for a tool it already called with the same arguments.
    """
    rng = time.rng
    count = rng.choices((1, 2, 3), (0.25, 0.5, 0.25) if mode == "parallel" else (0.5, 0.35, 0.15))[0]
    names = rng.sample(sorted(TOOLS), count)
    earlier = [name for name, _ in state.called if name in READ_ONLY_TOOLS]
    if earlier and rng.random() < REPEAT_TOOL_SHARE:
        again = rng.choice(earlier)
        if again not in names:
            names[-1] = again
    start = time.now
    ends = []
    for name in names:
        duration = TOOLS[name].sample_ns(rng)
        arguments = _tool_arguments(name, state)
        state.called.append((name, arguments))
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": _hex_id(rng, "call_", 96),
            "gen_ai.tool.call.arguments": arguments,
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
