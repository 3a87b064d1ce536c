"""Built-in matchers and first-token sources for what AI instrumentations emit.

A stage named ``retrieval``, ``model_call``, ``tool_calls`` or ``validation`` (guardrails
and inline evaluators) that has no ``match`` key uses these rules. They are data:
:data:`DIALECTS` says, for each vocabulary (the OpenTelemetry GenAI semantic conventions,
OpenLLMetry, OpenInference, Langfuse, NeMo Guardrails...), which
values of which attribute key put a span in which stage. Each (stage, key) pair compiles
to one single-attribute :class:`MatchRule`, so the classifier answers with one dictionary
probe per key. Values listed as ``not_stages`` are known and deliberately left out
(agents, workflows, chains): their spans contain the calls, they are not calls.
:data:`NOT_CALLS` lists values that make a span no call whatever else it carries (a
Logfire log record that repeats its call's operation name, a Semantic Kernel function run
that no model asked for). Recognising the next
instrumentation is a new row, not new code.

Each row says which class of evidence it rests on (:data:`EvidenceClass`). The general
conventions come first in meaning, whatever framework made the span: the GenAI semantic
conventions, and below them the database conventions (a vector database's search is
retrieval), the MCP conventions (a ``tools/call`` is a tool call) and HTTP client spans
to a model provider's API (:data:`PROVIDER_APIS`; a model call when no GenAI span covers
the same call, see ``_core/calls.py``). The rows of an instrumentation's or a framework's
own keys add what a stack says beyond them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from opentelemetry.trace import SpanKind

from latency_budget._config.matching import (
    GlobError,
    MatchRule,
    UrlMatch,
    ValueEndings,
    compile_glob,
    exact_values,
)
from latency_budget._config.model import FirstTokenSource

__all__ = [
    "AI_KEYS",
    "BUILTIN_STAGES",
    "CALL_KEYS",
    "CUT_FINISH_REASONS",
    "DEFAULT_FIRST_TOKEN",
    "DEFAULT_PARALLELIZABLE",
    "DEFAULT_PROTECTED",
    "DIALECTS",
    "EVALUATION_SPELLINGS",
    "EVIDENCE_CLASSES",
    "FIRST_TOKEN_SPELLINGS",
    "GENERATION_VALUES",
    "GUARDRAIL_SPELLINGS",
    "INVOCATIONS",
    "INVOCATION_KEYS",
    "MODEL_HOSTS_ENV",
    "MODEL_KEYS",
    "NOT_CALLS",
    "PROVIDER_APIS",
    "QUALITY_SPELLINGS",
    "REFUSED_FINISH_REASONS",
    "REQUEST_STAGES",
    "STOP_AND_HANDOFF",
    "TOOL_CALLS_ONLY",
    "TOOL_CALL_FINISH_REASONS",
    "CallKeys",
    "Dialect",
    "EvaluationSpelling",
    "EvidenceClass",
    "FinishSpelling",
    "FirstTokenSpelling",
    "GuardrailSpelling",
    "NotACall",
    "ProviderApi",
    "QualitySpelling",
    "StopOrHandoff",
    "ToolCallsOnly",
    "builtin_rules",
    "invokes",
    "looks_like_a_call",
    "plausible_request",
]

BUILTIN_STAGES: tuple[str, ...] = ("retrieval", "model_call", "tool_calls", "validation")
# The stages whose calls make a local root a request under the default ``requests`` rule
# (beside an agent or workflow invocation): start-up work holds none of them.
REQUEST_STAGES: tuple[str, ...] = ("model_call", "tool_calls")

_log = logging.getLogger(__name__)

# What a dialect row rests on: the general conventions (GenAI, database, MCP, an HTTP client
# span), or keys and values that one instrumentation or framework writes on its own.
EvidenceClass = Literal[
    "GenAI semconv",
    "database semconv",
    "MCP semconv",
    "HTTP client",
    "instrumentation's own keys",
    "framework's own keys",
]
EVIDENCE_CLASSES: tuple[EvidenceClass, ...] = get_args(EvidenceClass)


@dataclass(frozen=True, slots=True)
class ProviderApi:
    """One model provider's HTTP API: its hosts, and per stage the path endings of its calls.

    A host is exact (``api.openai.com``) or a glob (``*.openai.azure.com``); ``*`` is any
    host (the OpenAI- and Anthropic-compatible paths that LLM proxies and local servers serve).
    """

    source: str
    hosts: tuple[str, ...]
    stages: Mapping[str, tuple[str, ...]]


# The OpenAI-compatible routes (OpenAI's own, and what most providers, proxies and local
# servers copy), and the Anthropic messages route.
_OPENAI_ROUTES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"model_call": ("/chat/completions", "/completions", "/responses"), "retrieval": ("/embeddings",)}
)
_GEMINI_ROUTES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "model_call": (":generateContent", ":streamGenerateContent", ":rawPredict", ":streamRawPredict"),
        "retrieval": (":embedContent", ":batchEmbedContents"),
    }
)
MODEL_HOSTS_ENV = "LATENCY_BUDGET_MODEL_HOSTS"


def _hosts_from_env() -> tuple[str, ...]:
    """Hosts (or host globs) named in LATENCY_BUDGET_MODEL_HOSTS, comma-separated; a bad glob logs and is skipped."""
    hosts: list[str] = []
    for listed in os.environ.get(MODEL_HOSTS_ENV, "").split(","):
        host = listed.strip().lower()
        if not host:
            continue
        try:
            compile_glob(host)
        except GlobError as error:
            _log.warning("%s: %s: ignored", MODEL_HOSTS_ENV, error)
            continue
        hosts.append(host)
    return tuple(hosts)


# Model providers' HTTP APIs: a POST whose path ends with one of a stage's endings, to one of
# the hosts, is a call of that stage (HTTP client spans, read when no GenAI span says more).
# Hosts named in LATENCY_BUDGET_MODEL_HOSTS (a gateway of yours) take the OpenAI-compatible
# and Anthropic routes too.
PROVIDER_APIS: tuple[ProviderApi, ...] = (
    ProviderApi("OpenAI", ("api.openai.com",), _OPENAI_ROUTES),
    ProviderApi("Azure OpenAI", ("*.openai.azure.com", "*.services.ai.azure.com"), _OPENAI_ROUTES),
    ProviderApi("Anthropic", ("api.anthropic.com",), {"model_call": ("/v1/messages",)}),
    ProviderApi("Google Gemini API", ("generativelanguage.googleapis.com",), _GEMINI_ROUTES),
    ProviderApi("Google Vertex AI", ("aiplatform.googleapis.com", "*-aiplatform.googleapis.com"), _GEMINI_ROUTES),
    ProviderApi(
        "Amazon Bedrock",
        ("bedrock-runtime.*.amazonaws.com", "bedrock-runtime-fips.*.amazonaws.com"),
        {"model_call": ("/converse", "/converse-stream", "/invoke", "/invoke-with-response-stream")},
    ),
    ProviderApi(
        "OpenAI-compatible providers",
        (
            "api.mistral.ai",
            "api.groq.com",
            "api.deepseek.com",
            "api.together.xyz",
            "api.fireworks.ai",
            "api.x.ai",
            "openrouter.ai",
            "api.perplexity.ai",
        ),
        _OPENAI_ROUTES,
    ),
    ProviderApi(
        "Cohere",
        ("api.cohere.com", "api.cohere.ai"),
        {"model_call": ("/v2/chat", "/v1/chat"), "retrieval": ("/v2/embed", "/v1/embed", "/v2/rerank", "/v1/rerank")},
    ),
    # LLM proxies (LiteLLM's, vLLM's, Ollama's OpenAI-compatible server...) and gateways, on any
    # host: only the versioned paths, which an application's own API seldom copies.
    ProviderApi(
        "OpenAI- and Anthropic-compatible servers, any host",
        ("*",),
        {
            "model_call": ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"),
            "retrieval": ("/v1/embeddings",),
        },
    ),
    ProviderApi(
        f"hosts named in {MODEL_HOSTS_ENV}",
        _hosts_from_env(),
        {
            "model_call": (*_OPENAI_ROUTES["model_call"], "/messages"),
            "retrieval": _OPENAI_ROUTES["retrieval"],
        },
    ),
)


@dataclass(frozen=True, slots=True)
class CallKeys:
    """Where one vocabulary writes the facts of a call that the latency levers read.

    Each column lists attribute keys; across :data:`DIALECTS` they are tried in the
    table's order (the first a span carries wins), and :data:`CALL_KEYS` merges them.
    ``generation`` says that the dialect's ``model_call`` values are generation calls
    (chat or completion, whose output can stream).
    """

    model: tuple[str, ...] = ()  # the model called (a response model is a fall-back)
    response_model: tuple[str, ...] = ()
    provider: tuple[str, ...] = ()
    input_tokens: tuple[str, ...] = ()
    output_tokens: tuple[str, ...] = ()
    tool_name: tuple[str, ...] = ()  # what a call without a model called
    data_source: tuple[str, ...] = ()  # ... when it names no tool either
    arguments: tuple[str, ...] = ()  # what makes two calls identical (the cache lever)
    results: tuple[str, ...] = ()  # what an identical call returned: differing results are no cache's
    instructions: tuple[str, ...] = ()  # part of a call's identity too
    stream: tuple[str, ...] = ()  # true when the call asked to stream
    finish_reasons: tuple[str, ...] = ()
    # Input tokens the provider served from its prompt cache (a prefix of the prompt), and
    # those it wrote to it; each counted within the input tokens (the context lever).
    cached_input_tokens: tuple[str, ...] = ()
    cache_creation_input_tokens: tuple[str, ...] = ()
    reasoning_tokens: tuple[str, ...] = ()  # output tokens spent reasoning (the reasoning lever)
    reasoning_level: tuple[str, ...] = ()  # the reasoning level (effort) the call asked for
    generation: bool = False


@dataclass(frozen=True, slots=True)
class Dialect:
    """One attribute key of one vocabulary: which of its values mean which built-in stage."""

    source: str  # who writes the key (for the docs and error messages)
    key: str
    stages: Mapping[str, tuple[str, ...]]
    not_stages: tuple[str, ...] = ()  # values known to mean "not a call": agents, workflows...
    # Those of ``not_stages`` that invoke an agent or a workflow: a local root with one is
    # plausibly a request (the default ``requests`` rule), unlike creating an agent.
    invocations: tuple[str, ...] = ()
    # "tested": real packages run in tests/frameworks or tests/instrumentation; "source": read
    # from the framework's source only, tested on the span shapes the source shows.
    evidence: Literal["tested", "source"] = "tested"
    # Where the vocabulary writes a call's model, tokens, arguments... (the latency levers).
    call_keys: CallKeys = CallKeys()
    # Globs of span names on which alone the row holds (empty: any name), and of span names
    # on which it does not (a vector database's writes are no retrieval): settled once per
    # span name, never per span, so a span of another name never reads the row's key.
    names: tuple[str, ...] = ()
    not_names: tuple[str, ...] = ()
    # For the HTTP client row: the provider APIs whose URLs put a client span in a stage
    # (``key`` is then the URL key, and ``stages`` is empty).
    routes: tuple[ProviderApi, ...] = ()
    # stage -> endings of the key's value that put a span in it (a framework whose class
    # names follow a convention: Haystack's `...Retriever`, `...ChatGenerator`).
    endings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The class of evidence the row rests on (the dialect table's "evidence class").
    evidence_class: EvidenceClass = field(kw_only=True)
    values: Mapping[str, str] = field(init=False, repr=False, compare=False)  # value -> stage

    def __post_init__(self) -> None:
        if self.evidence_class not in EVIDENCE_CLASSES:
            raise ValueError(f"{self.source}: {self.evidence_class!r} is no evidence class")
        values: dict[str, str] = {}
        for stage, listed in self.stages.items():
            if stage not in BUILTIN_STAGES:
                raise ValueError(f"{self.source}: {stage!r} is not a built-in stage")
            for value in listed:
                if values.setdefault(value, stage) != stage or value in self.not_stages:
                    raise ValueError(f"{self.source}: {self.key}={value!r} is listed twice")
        if not set(self.invocations) <= set(self.not_stages):
            raise ValueError(f"{self.source}: invocations must be among not_stages")
        endings = tuple(ending for listed in self.endings.values() for ending in listed)
        if any(value.endswith(endings) for value in self.not_stages) if endings else False:
            raise ValueError(f"{self.source}: a value of not_stages ends like a stage's value")
        object.__setattr__(self, "endings", MappingProxyType(dict(self.endings)))
        object.__setattr__(self, "stages", MappingProxyType(dict(self.stages)))
        object.__setattr__(self, "values", MappingProxyType(values))


# The span names of OpenLLMetry's vector-database instrumentations ({vendor}.{method}; Weaviate's
# db.weaviate.{object}.{method}; Azure AI Search's azure_search.{method}), the read operations
# the current database conventions put first in a name ({db.operation.name} {collection}), and
# the writes (indexing a corpus is start-up work, not retrieval).
_VECTOR_NAMES: tuple[str, ...] = (
    "qdrant.*",
    "pinecone.*",
    "chroma.*",
    "milvus.*",
    "lancedb.*",
    "marqo.*",
    "db.weaviate.*",
    "azure_search.*",
    "azure.search.*",
)
_VECTOR_OPERATIONS: tuple[str, ...] = (
    "search *",
    "query *",
    "query_points *",
    "hybrid_search *",
    "similarity_search *",
    "recommend *",
    "discover *",
    "scroll *",
    "fetch *",
)
_VECTOR_WRITES: tuple[str, ...] = (
    "*upsert*",
    "*insert*",
    "*.add",
    "add *",
    "*add_*",
    "*upload*",
    "*delete*",
    "*update*",
    "*modify*",
    "*create*",
    "*set_payload*",
    "*overwrite*",
    "*replace*",
    "*drop*",
    "*merge*",
    "*index_documents*",
)


DIALECTS: tuple[Dialect, ...] = (
    Dialect(
        "OpenTelemetry GenAI semantic conventions",
        "gen_ai.operation.name",
        {
            "retrieval": ("retrieval", "embeddings"),
            "model_call": ("chat", "text_completion", "generate_content"),
            "tool_calls": ("execute_tool",),
            # The security conventions' guardrail span (semantic-conventions PR 3233).
            "validation": ("apply_guardrail",),
        },
        not_stages=("invoke_agent", "create_agent", "invoke_workflow"),
        invocations=("invoke_agent", "invoke_workflow"),
        call_keys=CallKeys(
            model=("gen_ai.request.model", "gen_ai.response.model"),
            response_model=("gen_ai.response.model",),
            provider=("gen_ai.provider.name",),
            input_tokens=("gen_ai.usage.input_tokens",),
            output_tokens=("gen_ai.usage.output_tokens",),
            tool_name=("gen_ai.tool.name",),
            data_source=("gen_ai.data_source.id",),
            arguments=("gen_ai.tool.call.arguments", "gen_ai.retrieval.query.text", "gen_ai.input.messages"),
            results=("gen_ai.tool.call.result", "gen_ai.retrieval.documents", "gen_ai.output.messages"),
            instructions=("gen_ai.system_instructions",),
            stream=("gen_ai.request.stream",),
            finish_reasons=("gen_ai.response.finish_reasons",),
            # Pydantic AI and Logfire write the conventions' keys, and their older
            # `details` keys beside them; Strands its own name for cache writes too.
            cached_input_tokens=("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.details.cache_read_tokens"),
            cache_creation_input_tokens=(
                "gen_ai.usage.cache_creation.input_tokens",
                "gen_ai.usage.details.cache_write_tokens",
                "gen_ai.usage.cache_write_input_tokens",
            ),
            reasoning_tokens=("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.details.reasoning_tokens"),
            reasoning_level=("gen_ai.request.reasoning.level", "gen_ai.request.reasoning.effort"),
            generation=True,
        ),
        evidence_class="GenAI semconv",
    ),
    Dialect(
        # opentelemetry-semantic-conventions-ai's GenAICustomOperationName, and the LlamaIndex
        # instrumentation's reranker spans.
        "OpenLLMetry (Traceloop)",
        "gen_ai.operation.name",
        {"retrieval": ("vector_db_retrieve", "rerank"), "model_call": ("llm_request",)},
        not_stages=("execute_task",),
        # The conventions' older names, which OpenLLMetry still writes.
        call_keys=CallKeys(
            provider=("gen_ai.system",),
            input_tokens=("gen_ai.usage.prompt_tokens",),
            output_tokens=("gen_ai.usage.completion_tokens",),
            arguments=("gen_ai.prompt",),
            results=("gen_ai.completion.0.content",),
            # opentelemetry-semantic-conventions-ai's names (its OpenAI instrumentation writes
            # the conventions' cache key, its Anthropic and Bedrock ones these too).
            cached_input_tokens=("gen_ai.usage.cache_read_input_tokens",),
            cache_creation_input_tokens=("gen_ai.usage.cache_creation_input_tokens",),
            reasoning_tokens=("gen_ai.usage.reasoning_tokens", "llm.usage.reasoning_tokens"),
            reasoning_level=("gen_ai.request.reasoning_effort", "llm.request.reasoning_effort"),
        ),
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        "OpenInference",
        "openinference.span.kind",
        {
            "retrieval": ("RETRIEVER", "EMBEDDING", "RERANKER"),
            "model_call": ("LLM",),
            "tool_calls": ("TOOL",),
            # Guardrails (and guardrails-ai's validators, which write GUARDRAIL), and evaluators
            # run inside the request; an offline evaluation's spans are traces of their own.
            "validation": ("GUARDRAIL", "EVALUATOR"),
        },
        not_stages=("AGENT", "CHAIN", "PROMPT", "UNKNOWN"),
        invocations=("AGENT",),
        call_keys=CallKeys(
            model=("llm.model_name",),
            provider=("llm.provider",),
            input_tokens=("llm.token_count.prompt",),
            output_tokens=("llm.token_count.completion",),
            tool_name=("tool.name",),
            arguments=("input.value",),
            results=("output.value",),
            cached_input_tokens=(
                "llm.token_count.prompt_details.cache_read",
                "llm.token_count.prompt_details.cache_input",  # its older name, still defined
            ),
            cache_creation_input_tokens=("llm.token_count.prompt_details.cache_write",),
            reasoning_tokens=("llm.token_count.completion_details.reasoning",),
            generation=True,
        ),
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # TraceloopSpanKindValues: traceloop-sdk's @tool/@task/@agent/@workflow decorators.
        "OpenLLMetry (Traceloop)",
        "traceloop.span.kind",
        {"tool_calls": ("tool",)},
        not_stages=("workflow", "task", "agent", "unknown"),
        invocations=("workflow", "agent"),
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # langfuse._client.constants: the observation types of the Langfuse SDK (v3 and later).
        "Langfuse SDK",
        "langfuse.observation.type",
        {
            "retrieval": ("retriever", "embedding"),
            "model_call": ("generation",),
            "tool_calls": ("tool",),
            "validation": ("guardrail", "evaluator"),
        },
        not_stages=("span", "agent", "chain", "event"),
        invocations=("agent",),
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # LLMRequestTypeValues: what OpenLLMetry wrote before gen_ai.operation.name, still defined.
        "OpenLLMetry (Traceloop), older releases",
        "llm.request.type",
        {"retrieval": ("embedding", "rerank"), "model_call": ("chat", "completion")},
        not_stages=("unknown",),
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # litellm.integrations.opentelemetry (callbacks=["otel"]): each call's `litellm_request`
        # span carries litellm's call type (CallTypes) under llm.request.type and, with message
        # logging on, under gen_ai.operation.name too (`completion` written `chat`). The values
        # other rows lack: the async calls and the Responses and Anthropic messages routes.
        "LiteLLM, its own OpenTelemetry callback",
        "gen_ai.operation.name",
        {
            "model_call": ("acompletion", "atext_completion", "responses", "aresponses", "anthropic_messages"),
            "retrieval": ("embedding", "aembedding", "arerank"),
        },
        evidence="source",
        evidence_class="framework's own keys",
    ),
    Dialect(
        "LiteLLM, its own OpenTelemetry callback",
        "llm.request.type",
        {
            "model_call": (
                "acompletion",
                "text_completion",
                "atext_completion",
                "responses",
                "aresponses",
                "anthropic_messages",
            ),
            "retrieval": ("aembedding", "arerank"),
        },
        evidence="source",
        evidence_class="framework's own keys",
    ),
    Dialect(
        # semantic_kernel.utils.telemetry.model_diagnostics of older releases: operation names of
        # its own (dotted, plural), read from source. semantic-kernel 1.45.0, run for real in
        # tests/frameworks/semantic_kernel, writes the conventions' `chat` (streamed too) and
        # `execute_tool`, and `text_completions` (the row below).
        "Semantic Kernel, older releases",
        "gen_ai.operation.name",
        {
            "model_call": (
                "chat.completions",
                "chat.streaming_completions",
                "text.completions",
                "text.streaming_completions",
            )
        },
        evidence="source",
        evidence_class="framework's own keys",
    ),
    Dialect(
        # Seen on a framework's completion spans: the convention's name, plural.
        "operation names off the convention",
        "gen_ai.operation.name",
        {"model_call": ("text_completions", "chat_completions", "chat_completion")},
        evidence="source",
        evidence_class="framework's own keys",
    ),
    Dialect(
        # langsmith._internal.otel._otel_exporter (LANGSMITH_OTEL_ENABLED): the run type. Its
        # gen_ai.operation.name maps llm->chat, tool->execute_tool, retriever and embedding
        # ->embeddings, but prompt->chat too: NOT_CALLS vetoes prompt runs.
        "LangSmith (LangChain, LangGraph)",
        "langsmith.span.kind",
        {"model_call": ("llm",), "retrieval": ("retriever", "embedding"), "tool_calls": ("tool",)},
        not_stages=("chain", "prompt", "parser"),
        evidence="tested",  # tests/frameworks/langsmith (langsmith 0.15.1, LangGraph 1.2.24)
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # mlflow.entities.SpanType, written JSON-encoded as every MLflow span attribute is.
        "MLflow Tracing",
        "mlflow.spanType",
        {
            "model_call": ('"LLM"', '"CHAT_MODEL"'),
            "retrieval": ('"RETRIEVER"', '"EMBEDDING"', '"RERANKER"'),
            "tool_calls": ('"TOOL"',),
            "validation": ('"GUARDRAIL"', '"EVALUATOR"'),
        },
        not_stages=('"AGENT"', '"CHAIN"', '"PARSER"', '"MEMORY"', '"UNKNOWN"', '"TASK"'),
        invocations=('"AGENT"',),
        evidence="source",
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # haystack.core.pipeline (traced by opentelemetry-haystack since haystack-ai 3): every
        # component run is a `haystack.component.run` span whose
        # only telling key is the component's class name. The common generators, retrievers,
        # embedders and rankers; ToolInvoker runs the tools; an Agent is an invocation.
        "Haystack, its own OpenTelemetry tracer",
        "haystack.component.type",
        {
            "model_call": (
                "OpenAIChatGenerator",
                "OpenAIGenerator",
                "AzureOpenAIChatGenerator",
                "AzureOpenAIGenerator",
                "HuggingFaceAPIChatGenerator",
                "HuggingFaceLocalChatGenerator",
                "AnthropicChatGenerator",
                "OllamaChatGenerator",
                "GoogleGenAIChatGenerator",
                "AmazonBedrockChatGenerator",
            ),
            "retrieval": (
                "InMemoryBM25Retriever",
                "InMemoryEmbeddingRetriever",
                "OpenAITextEmbedder",
                "SentenceTransformersTextEmbedder",
                "OpenAIDocumentEmbedder",
                "SentenceTransformersDocumentEmbedder",
                "SentenceTransformersSimilarityRanker",
                "TransformersSimilarityRanker",
            ),
            "tool_calls": ("ToolInvoker",),
        },
        not_stages=("Agent", "PromptBuilder", "ChatPromptBuilder", "AnswerBuilder", "DocumentWriter"),
        invocations=("Agent",),
        # Haystack's naming convention, which its integrations follow (qdrant-haystack's
        # QdrantEmbeddingRetriever, mistral-haystack's MistralChatGenerator...): the listed values
        # above are the ones tested; these endings stage the rest.
        endings={"model_call": ("Generator",), "retrieval": ("Retriever", "Embedder", "Ranker")},
        names=("haystack.component.run",),
        evidence="tested",  # tests/frameworks/haystack (opentelemetry-haystack)
        evidence_class="framework's own keys",
    ),
    Dialect(
        # lmnr.opentelemetry_lib (Laminar, browser-use's tracer): the lmnr.span.type of the spans
        # it starts. Its own instrumentations' call spans (`openai.chat`, `anthropic.chat`...)
        # carry `LLM` and no gen_ai.operation.name (its embedding spans are `LLM` too; its
        # `openai.response` spans carry no type); browser-use's `agent.run`, `agent.step` are
        # `DEFAULT`; the rest are its evaluations' spans.
        "Laminar (lmnr), browser-use's tracer",
        "lmnr.span.type",
        {"model_call": ("LLM",), "tool_calls": ("TOOL",)},
        not_stages=("DEFAULT", "PIPELINE", "EXECUTOR", "EVALUATOR", "HUMAN_EVALUATOR", "EVALUATION"),
        evidence="source",
        evidence_class="instrumentation's own keys",
    ),
    Dialect(
        # The database semantic conventions' system (older name), as OpenLLMetry's vector-database
        # instrumentations write it: opentelemetry-instrumentation-qdrant and -pinecone `Qdrant` and
        # `Pinecone` on CLIENT spans `qdrant.{method}`, `pinecone.{method}`; -chromadb, -milvus,
        # -weaviate, -lancedb `chroma`, `milvus`, `weaviate`, `lancedb` with db.operation the method;
        # Azure AI Search's `Azure AI Search`. A read (search, query, get, recommend, scroll...) is
        # retrieval; a write, told by its span name, is none (indexing a corpus is start-up work).
        "vector databases: the database semantic conventions (OpenLLMetry's vector-database instrumentations)",
        "db.system",
        {
            "retrieval": (
                "Qdrant",
                "qdrant",
                "Pinecone",
                "pinecone",
                "chroma",
                "chromadb",
                "milvus",
                "weaviate",
                "lancedb",
                "marqo",
                "Azure AI Search",
            )
        },
        names=_VECTOR_NAMES,
        not_names=_VECTOR_WRITES,
        evidence="source",
        evidence_class="database semconv",
        call_keys=CallKeys(data_source=("db.collection.name",)),
    ),
    Dialect(
        # The current database conventions: db.system.name, spans `{db.operation.name} {collection}`.
        "vector databases: the database semantic conventions (current names)",
        "db.system.name",
        {"retrieval": ("qdrant", "pinecone", "chroma", "chromadb", "milvus", "weaviate", "lancedb", "marqo")},
        names=_VECTOR_OPERATIONS,
        not_names=_VECTOR_WRITES,
        evidence="source",
        evidence_class="database semconv",
    ),
    Dialect(
        # The OpenTelemetry MCP semantic conventions (semantic-conventions-genai, gen-ai/mcp.md): client
        # spans `{mcp.method.name} {target}` (CLIENT), the server's (SERVER) in its own trace, with the
        # client's as remote parent. gen_ai.operation.name `execute_tool` is only recommended on a
        # `tools/call`: the method says it. The protocol's own traffic is no call. (OpenLLMetry's
        # opentelemetry-instrumentation-mcp writes `{tool}.tool` with traceloop.span.kind `tool`
        # instead, and `{method}.mcp` for the rest: rows above.)
        "MCP semantic conventions",
        "mcp.method.name",
        {"tool_calls": ("tools/call",)},
        not_stages=(
            "initialize",
            "notifications/initialized",
            "notifications/cancelled",
            "notifications/progress",
            "ping",
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "logging/setLevel",
        ),
        evidence="source",
        evidence_class="MCP semconv",
    ),
    Dialect(
        # HTTP client spans (opentelemetry-instrumentation-requests, -httpx, -aiohttp-client...): the
        # old conventions write http.method and http.url, the current http.request.method and url.full
        # (both read). A POST to a model provider's route (PROVIDER_APIS) is a model call, or an
        # embedding (retrieval); under a GenAI span of its stage it is part of that call (nested).
        "HTTP client spans to a model provider's API",
        "url.full",
        {},
        routes=PROVIDER_APIS,
        names=("POST", "POST *", "HTTP POST", "HTTP POST *"),  # the HTTP conventions' client span names
        evidence="source",
        evidence_class="HTTP client",
    ),
    Dialect(
        # nemoguardrails.tracing (NeMo Guardrails 0.16 and later): one INTERNAL `guardrails.rail`
        # span per rail that ran, its direction under rail.type (LLMRails writes `input`,
        # `output`; the IORails engine `Input`, `Output`). Its `guardrails.action` spans are steps
        # of a rail, its LLM calls are `chat`/`completion` spans of the conventions; dialog rails
        # steer the conversation rather than check it, and are no stage.
        "NeMo Guardrails",
        "rail.type",
        {"validation": ("input", "output", "Input", "Output")},
        not_stages=("dialog",),
        evidence="source",
        evidence_class="framework's own keys",
    ),
)


@dataclass(frozen=True, slots=True)
class NotACall:
    """Values of one key that make a span no call, whatever its other attributes say.

    A value ``None`` means the key's absence. A row with ``scope`` holds only on that
    instrumentation scope's spans (settled once per scope: spans of other scopes never
    read it).
    """

    source: str
    key: str
    values: tuple[str | None, ...]
    why: str  # for the dialect table (docs)
    scope: str | None = None


NOT_CALLS: tuple[NotACall, ...] = (
    NotACall(
        "Logfire",
        "logfire.span_type",
        ("log",),
        "a log record written as a zero-length span (instrument_openai's `streaming response from ...` "
        "beside a streamed call carries the call's gen_ai.operation.name)",
    ),
    NotACall(
        "Google ADK",
        "gen_ai.tool.name",
        ("(merged tools)",),
        "after parallel tool calls, one more `execute_tool (merged)` span of under a millisecond that "
        "merges their responses, with placeholder attributes (google.adk.telemetry.tracing)",
    ),
    NotACall(
        "LangSmith",
        "langsmith.span.kind",
        ("prompt",),
        "a prompt-template run, which its exporter writes with gen_ai.operation.name=chat",
    ),
    NotACall(
        # semantic_kernel.utils.telemetry.model_diagnostics.function_tracer: every kernel function
        # run is `execute_tool {function}`, the model's tool call id on it only when a model's
        # tool call ran it (kernel.invoke_function_call). Seen in tests/frameworks/semantic_kernel.
        "Semantic Kernel",
        "gen_ai.tool.call.id",
        (None,),
        "a kernel function run that no model asked for: the prompt function `kernel.invoke_prompt` runs "
        "(its `execute_tool {generated name}` span holds the model calls and the tools), a function the "
        "application invokes itself, or a prompt template calls",
        scope="semantic_kernel.functions.kernel_function",
    ),
)


def _compile(dialects: tuple[Dialect, ...], not_calls: tuple[NotACall, ...]) -> dict[str, tuple[MatchRule, ...]]:
    """One single-attribute rule per (stage, key), values merged across dialects sharing a key.

    Every rule carries the same vetoes, from ``not_calls``.
    """
    by_stage: dict[str, dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]]] = {
        stage: {} for stage in BUILTIN_STAGES
    }
    probes: dict[str, list[MatchRule]] = {stage: [] for stage in BUILTIN_STAGES}
    owner: dict[tuple[str, str], str] = {}
    for dialect in dialects:
        for value, stage in dialect.values.items():
            other = owner.setdefault((dialect.key, value), stage)
            if other != stage:
                raise ValueError(f"{dialect.key}={value!r} is both {other} and {stage}")
            by_stage[stage].setdefault((dialect.key, dialect.names, dialect.not_names), []).append(value)
        named = _name_pattern(dialect.names, dialect.not_names)
        for stage, endings in dialect.endings.items():
            probes[stage].append(MatchRule(name=named, probe=ValueEndings(dialect.key, endings)))
        for stage in BUILTIN_STAGES:
            routes = tuple(
                (host, api.stages[stage]) for api in dialect.routes if stage in api.stages for host in api.hosts
            )
            if routes:
                probes[stage].append(MatchRule(name=named, kind=SpanKind.CLIENT, probe=UrlMatch(routes)))
    unless = tuple((entry.key, exact_values(entry.values)) for entry in not_calls if entry.scope is None)
    scoped = tuple(
        (compile_glob(entry.scope), ((entry.key, exact_values(entry.values)),))
        for entry in not_calls
        if entry.scope is not None
    )
    return {
        stage: (
            *(
                MatchRule(
                    name=_name_pattern(names, not_names),
                    attributes=((key, exact_values(values)),),
                    unless=unless,
                    scoped_unless=scoped,
                )
                for (key, names, not_names), values in keys.items()
            ),
            *probes[stage],
        )
        for stage, keys in by_stage.items()
    }


def _name_pattern(names: tuple[str, ...], not_names: tuple[str, ...]) -> re.Pattern[str] | None:
    """A span-name pattern: one of ``names`` (any name when empty) and none of ``not_names``; None for any name."""
    if not names and not not_names:
        return None
    pattern = "(?!" + "|".join(compile_glob(glob).pattern for glob in not_names) + ")" if not_names else ""
    if names:
        pattern += "(?:" + "|".join(compile_glob(glob).pattern for glob in names) + ")"
    return re.compile(pattern)


_BUILTIN = _compile(DIALECTS, NOT_CALLS)


def _merge_call_keys(dialects: tuple[Dialect, ...]) -> CallKeys:
    """Every dialect's call keys, column by column, in the table's order (once each)."""
    columns: dict[str, dict[str, None]] = {}
    for dialect in dialects:
        for column in CallKeys.__slots__:
            if column != "generation":
                columns.setdefault(column, {}).update(dict.fromkeys(getattr(dialect.call_keys, column)))
    merged: dict[str, Any] = {column: tuple(keys) for column, keys in columns.items()}
    return CallKeys(**merged)


# What the latency levers read of a call (_core/call_facts.py), merged from DIALECTS.
CALL_KEYS: CallKeys = _merge_call_keys(DIALECTS)
# (key, values) of the dialects whose model_call values are generation calls, in the
# table's order: the first key a span carries says whether it is one.
GENERATION_VALUES: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (dialect.key, frozenset(dialect.stages.get("model_call", ())))
    for dialect in DIALECTS
    if dialect.call_keys.generation
)


@dataclass(frozen=True, slots=True)
class StopOrHandoff:
    """A tool-call span that is an agent framework's bookkeeping, not a tool that ran.

    ``kind``: ``stop`` (the loop's way to end), ``handoff`` (control passes to another
    agent, which then runs outside the tool) or ``delegation`` (the tool runs another agent
    inside it: that agent's tool calls are the work, counted each). ``name`` is the tool's
    name as its spans carry it (``gen_ai.tool.name``, OpenInference's ``tool.name``,
    OpenLLMetry's ``traceloop.entity.name``, else the span name less ``execute_tool `` and
    ``.tool``); with ``prefix`` every name starting with it. With ``empty_arguments`` only a
    call that carries no arguments is bookkeeping (a tool of yours with that name and
    arguments still counts).
    """

    framework: str
    kind: Literal["stop", "handoff", "delegation"]
    name: str
    evidence: str
    prefix: bool = False
    empty_arguments: bool = False


# Agent frameworks' stop signals and handoffs written as tools: not counted as tool calls, and
# the calls they hold count as if they were not there (a delegated agent's tools, one each).
STOP_AND_HANDOFF: tuple[StopOrHandoff, ...] = (
    StopOrHandoff(
        "DSPy ReAct",
        "stop",
        "finish",
        "dspy/predict/react.py: ReAct adds a `finish` tool with no arguments, which the model calls to end the loop",
        empty_arguments=True,
    ),
    StopOrHandoff(
        "smolagents",
        "stop",
        "final_answer",
        "smolagents/default_tools.py: FinalAnswerTool (`final_answer`), the "
        "call that ends a ToolCallingAgent's or CodeAgent's loop with the answer",
    ),
    StopOrHandoff(
        "OpenAI Agents SDK, LangGraph supervisor and swarm, AutoGen AgentChat Swarm, Google ADK",
        "handoff",
        "transfer_to_",
        "agents/handoffs (Handoff.default_tool_name: transfer_to_{agent}); langgraph-supervisor "
        "handoff.py (create_handoff_tool: transfer_to_{agent}); autogen_agentchat.base.Handoff (transfer_to_{target}); "
        "google.adk.tools.transfer_to_agent_tool (`transfer_to_agent`)",
        prefix=True,
    ),
    StopOrHandoff(
        "LangGraph supervisor",
        "handoff",
        "transfer_back_to_",
        "langgraph-supervisor handoff.py (create_handoff_back_messages: transfer_back_to_{supervisor})",
        prefix=True,
    ),
    StopOrHandoff(
        "OpenAI Agents SDK + openinference-instrumentation-openai-agents",
        "handoff",
        "handoff to ",
        "openinference openai_agents/_processor.py: a HandoffSpanData span is `handoff to {agent}`, kind TOOL",
        prefix=True,
    ),
    StopOrHandoff(
        "Strands Agents Swarm",
        "handoff",
        "handoff_to_agent",
        "strands/multiagent/swarm.py: the swarm's coordination tool `handoff_to_agent`",
    ),
    StopOrHandoff(
        "CrewAI",
        "delegation",
        "Delegate work to coworker",
        "crewai/tools/agent_tools/delegate_work_tool.py: the coworker agent runs inside the tool",
    ),
    StopOrHandoff(
        "CrewAI",
        "delegation",
        "Ask question to coworker",
        "crewai/tools/agent_tools/ask_question_tool.py: the coworker agent runs inside the tool",
    ),
)


# Stages whose independent calls could usually run concurrently.
DEFAULT_PARALLELIZABLE: frozenset[str] = frozenset({"retrieval", "tool_calls"})
# Stages whose work no latency lever may cache, skip, shorten or move (``protected: true``).
DEFAULT_PROTECTED: frozenset[str] = frozenset({"validation"})


@dataclass(frozen=True, slots=True)
class FirstTokenSpelling:
    """One way an instrumentation records time to first token: who writes it, and how to read it."""

    source: str  # who writes it (for the docs)
    read: FirstTokenSource

    @property
    def unit(self) -> str:
        """``s``, ``ms``, ``us``, ``ns``, ``iso8601`` (an instant), or ``event`` (an event's timestamp)."""
        return "event" if self.read.event is not None else self.read.unit


# Every first-token spelling seen, with its unit, in the order they are tried: a span
# that carries several is read from the first. Semantic-convention METRIC names appear
# too: frameworks write them as span attributes, in a unit of their own.
FIRST_TOKEN_SPELLINGS: tuple[FirstTokenSpelling, ...] = (
    FirstTokenSpelling(
        "pydantic-ai, Logfire (seconds from the request's start, on streamed chat spans)",
        FirstTokenSource(attribute="gen_ai.client.operation.time_to_first_chunk", unit="s"),
    ),
    FirstTokenSpelling(
        "OpenTelemetry GenAI semantic conventions: the span attribute (current on spans)",
        FirstTokenSource(attribute="gen_ai.response.time_to_first_chunk", unit="s"),
    ),
    FirstTokenSpelling(
        # strands.telemetry.tracer: metrics["timeToFirstByteMs"] on its `chat` spans.
        "Strands Agents: the semantic conventions' server metric name, in milliseconds",
        FirstTokenSource(attribute="gen_ai.server.time_to_first_token", unit="ms", scope="strands.telemetry.tracer"),
    ),
    FirstTokenSpelling(
        "OpenLIT: the semantic conventions' server metric name as a span attribute, in seconds (its unit)",
        FirstTokenSource(attribute="gen_ai.server.time_to_first_token", unit="s"),
    ),
    FirstTokenSpelling(
        # Claude Code's traces (beta), from the Claude Agent SDK's CLI: its monitoring docs.
        "Claude Code (the Claude Agent SDK's CLI): `claude_code.llm_request` spans, in milliseconds",
        FirstTokenSource(attribute="ttft_ms", unit="ms"),
    ),
    FirstTokenSpelling(
        # LiveKit Agents (livekit.agents.llm.llm) writes it too, for Langfuse: JSON-quoted on its
        # `llm_request` spans, unquoted on a realtime model's turn (telemetry.utils).
        "Langfuse (and LiveKit Agents): the instant of the first token, a JSON-quoted ISO-8601 string",
        FirstTokenSource(attribute="langfuse.observation.completion_start_time", unit="iso8601"),
    ),
    FirstTokenSpelling("an event at the first token", FirstTokenSource(event="gen_ai.first_token")),
    FirstTokenSpelling(
        "OpenInference (OpenAI, LlamaIndex): an event when the first chunk arrives",
        FirstTokenSource(event="First Token Stream Event"),
    ),
    FirstTokenSpelling(
        "OpenLLMetry (OpenAI): one event per streamed chunk; the first one is the first token",
        FirstTokenSource(event="gen_ai.content.completion.chunk"),
    ),
)

# Where instrumentations record time to first token, in the order they are tried.
DEFAULT_FIRST_TOKEN: tuple[FirstTokenSource, ...] = tuple(spelling.read for spelling in FIRST_TOKEN_SPELLINGS)


@dataclass(frozen=True, slots=True)
class ToolCallsOnly:
    """How one vocabulary says that a model call answered with tool calls only (no text for the user).

    Either ``finish_key`` holds the call's finish reasons (a string or a sequence of
    them): tool calls only when every one is in :data:`TOOL_CALL_FINISH_REASONS`. Or
    ``messages_key`` holds the output messages, every part of them a tool call. Or
    ``tool_call_key`` is present while ``text_key`` is absent or empty. With ``event``,
    ``finish_key`` is read from the first event of that name that has it, not from the
    span's attributes. A row with ``scope`` is read only on that instrumentation scope's
    spans (so its events are read only there).
    """

    source: str
    finish_key: str | None = None
    event: str | None = None
    scope: str | None = None
    tool_call_key: str | None = None
    text_key: str | None = None
    # The conventions' output messages (a JSON array of {role, parts: [{type, ...}]}): tool
    # calls only when it has parts and every part is a `tool_call`.
    messages_key: str | None = None


# The finish reasons that mean "asked for tools": the conventions' `tool_call`, OpenAI's
# `tool_calls` (and its older `function_call`), Anthropic's and Bedrock's `tool_use`.
TOOL_CALL_FINISH_REASONS: frozenset[str] = frozenset({"tool_call", "tool_calls", "function_call", "tool_use"})

# Read in this order; the first that the span carries decides. What the output holds
# (its parts' types) comes before a finish reason: Gemini ends a turn of function calls
# with `STOP`, which says nothing of what was sent.
TOOL_CALLS_ONLY: tuple[ToolCallsOnly, ...] = (
    ToolCallsOnly(
        "OpenTelemetry GenAI semantic conventions' output messages (pydantic-ai, which writes no finish reason "
        "for every model; opentelemetry-instrumentation-google-genai, whose function-call turns finish `stop`)",
        messages_key="gen_ai.output.messages",
    ),
    ToolCallsOnly(
        "OpenTelemetry GenAI semantic conventions (pydantic-ai, Logfire, OpenLLMetry, OpenLIT)",
        finish_key="gen_ai.response.finish_reasons",
    ),
    ToolCallsOnly("OpenLLMetry (Traceloop), indexed completions", finish_key="gen_ai.completion.0.finish_reason"),
    ToolCallsOnly(
        # The Anthropic SDKs' and Claude Code's own spans: the Messages API's stop_reason
        # (`tool_use`, `end_turn`) and no conventions' finish reasons (PostHog's ingestion
        # of them reads the same key).
        "Anthropic's own spans: the Messages API stop reason",
        finish_key="anthropic.message.stop_reason",
    ),
    ToolCallsOnly(
        "OpenInference: the first output message has tool calls and no text",
        tool_call_key="llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
        text_key="llm.output_messages.0.message.content",
    ),
    ToolCallsOnly(
        # strands.telemetry.tracer.end_model_invoke_span: the stop reason (`tool_use`) in the
        # `gen_ai.choice` event of its `chat` span (tests/frameworks/strands).
        "Strands Agents: the finish reason of its chat span's `gen_ai.choice` event",
        finish_key="finish_reason",
        event="gen_ai.choice",
        scope="strands.telemetry.tracer",
    ),
)


# Keys that only an AI call's span carries, in any of the vocabularies: a model, token
# counts, a prompt, a tool or a retriever. A span with one that is in no stage (and is no
# known container, such as an agent) is probably a call of an unknown dialect: the
# processor counts those that name a model (MODEL_KEYS, ``stats().unstaged_ai_spans``).
AI_KEYS: frozenset[str] = frozenset(
    {
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.prompt_tokens",
        "gen_ai.usage.completion_tokens",
        "gen_ai.prompt",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "llm.model_name",
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "llm.request.model",
        "llm.usage.total_tokens",
        "embedding.model_name",
        "retrieval.documents",
        "tool.name",
    }
)


# The keys that name a call's model: what the processor probes on every span that matched no
# stage (two dictionary probes, far cheaper than scanning a span's keys), to count the AI
# calls of dialects it does not know.
MODEL_KEYS: tuple[str, str] = ("gen_ai.request.model", "llm.model_name")


def _containers(dialects: tuple[Dialect, ...], not_calls: tuple[NotACall, ...]) -> Mapping[str, frozenset[str]]:
    merged: dict[str, set[str]] = {}
    for dialect in dialects:
        merged.setdefault(dialect.key, set()).update(dialect.not_stages)
    for entry in not_calls:
        if entry.scope is None:  # a scoped row needs the span's scope, which looks_like_a_call is not given
            merged.setdefault(entry.key, set()).update(value for value in entry.values if value is not None)
    return MappingProxyType({key: frozenset(values) for key, values in merged.items()})


# key -> values known to mean "no call" (agents, workflows, chains, log records).
_NO_CALL: Mapping[str, frozenset[str]] = _containers(DIALECTS, NOT_CALLS)
_NO_CALL_KEYS: frozenset[str] = frozenset(_NO_CALL)


def looks_like_a_call(attributes: Mapping[str, object]) -> bool:
    """Whether a span that is in no stage looks like an AI call all the same.

    It carries one of :data:`AI_KEYS`, and no dialect key says it is something else
    (an agent, a workflow, a chain, a log record). Cheap when it carries none of them.
    """
    if AI_KEYS.isdisjoint(attributes):
        return False
    for key in _NO_CALL_KEYS.intersection(attributes):  # usually none or one
        value = attributes[key]
        if value.__class__ is str and value in _NO_CALL[key]:
            return False
    return True


def builtin_rules(stage: str) -> tuple[MatchRule, ...] | None:
    """The built-in rules for a stage name, or ``None`` when it has none."""
    return _BUILTIN.get(stage)


def _invocations(dialects: tuple[Dialect, ...]) -> Mapping[str, frozenset[str]]:
    merged: dict[str, set[str]] = {}
    for dialect in dialects:
        if dialect.invocations:
            merged.setdefault(dialect.key, set()).update(dialect.invocations)
    return MappingProxyType({key: frozenset(values) for key, values in merged.items()})


# key -> the values that say a span invokes an agent or a workflow, from DIALECTS.
INVOCATIONS: Mapping[str, frozenset[str]] = _invocations(DIALECTS)
_REQUEST_KINDS = (SpanKind.SERVER, SpanKind.CONSUMER)


# The keys of INVOCATIONS: a span with none of them (one set operation) invokes nothing.
INVOCATION_KEYS: frozenset[str] = frozenset(INVOCATIONS)


def invokes(attributes: Mapping[str, object]) -> bool:
    """Whether a span invokes an agent or a workflow (:data:`INVOCATIONS`)."""
    for key in INVOCATION_KEYS.intersection(attributes):
        value = attributes[key]
        if value.__class__ is str and value in INVOCATIONS[key]:
            return True
    return False


def plausible_request(kind: SpanKind, remote_parent: bool, attributes: Mapping[str, object]) -> bool:
    """Whether a local root is a request by itself under the default ``requests`` rule.

    It is when it is a server or consumer span, when its parent is remote, or when it
    invokes an agent or a workflow (:data:`INVOCATIONS`). Any other local root is a
    request only when it contains a model call (the caller looks); start-up work
    (building an index, embedding a corpus, creating an agent) contains none.
    """
    if kind in _REQUEST_KINDS or remote_parent:
        return True
    for key, values in INVOCATIONS.items():
        value = attributes.get(key)
        if value.__class__ is str and value in values:
            return True
    return False


@dataclass(frozen=True, slots=True)
class EvaluationSpelling:
    """How one vocabulary writes an evaluation result of a call: a span event or a log record (event) named ``event``.

    ``name_key`` names the evaluation (``correctness``), ``score_key`` holds its number,
    ``label_key`` its label (``pass``); ``response_id_key`` names the evaluated answer when
    the record is not parented to its span; a record with ``error_key`` is an evaluation
    that failed, and says nothing of the answer.
    """

    source: str
    event: str
    name_key: str
    score_key: str
    label_key: str | None = None
    response_id_key: str | None = None
    error_key: str | None = None
    evidence_class: EvidenceClass = field(default="GenAI semconv", kw_only=True)


@dataclass(frozen=True, slots=True)
class GuardrailSpelling:
    """How one vocabulary writes a guardrail's decision on a span of its own: ``key`` and its values.

    ``flagged`` values mean the guardrail blocked, changed or flagged what it checked,
    ``passed`` values that it let it through. With ``target_key``, the span judged the
    model's answer only when that key is absent or holds one of ``answer_targets`` (an input
    guardrail judges the prompt, not an answer).
    """

    source: str
    key: str
    flagged: tuple[str, ...]
    passed: tuple[str, ...]
    target_key: str | None = None
    answer_targets: tuple[str, ...] = ()
    evidence_class: EvidenceClass = field(default="GenAI semconv", kw_only=True)


@dataclass(frozen=True, slots=True)
class FinishSpelling:
    """Finish reasons (read from ``CALL_KEYS.finish_reasons``) that say an answer was cut short or refused."""

    source: str
    cut: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    evidence_class: EvidenceClass = field(default="GenAI semconv", kw_only=True)


QualitySpelling = EvaluationSpelling | GuardrailSpelling | FinishSpelling

# What the telemetry says of the answers' quality (issue 46): every spelling of an evaluation
# result, a guardrail's decision and a finish reason that the quality reader
# (``_core/quality_reader.py``) reads, one entry each. Recognising the next one is a new row.
QUALITY_SPELLINGS: tuple[QualitySpelling, ...] = (
    EvaluationSpelling(
        # The GenAI semantic conventions' event (events.yaml): parented to the evaluated span,
        # or naming its gen_ai.response.id; written as a span event or as a log record.
        # splunk-otel-util-genai-evals (EvaluationEventsEmitter: a log record in the evaluated
        # call's span context, tests/frameworks/genai_evals) and the Azure AI tracer of
        # langchain-azure-ai (the logs API, a span event as fall-back) emit it.
        "OpenTelemetry GenAI semantic conventions: the gen_ai.evaluation.result event",
        "gen_ai.evaluation.result",
        name_key="gen_ai.evaluation.name",
        score_key="gen_ai.evaluation.score.value",
        label_key="gen_ai.evaluation.score.label",
        response_id_key="gen_ai.response.id",
        error_key="error.type",
    ),
    EvaluationSpelling(
        # splunk-otel-util-genai-evals' legacy event (emit_legacy_event): the same attributes
        # under the event name the conventions' drafts used.
        "splunk-otel-util-genai-evals: the legacy gen_ai.evaluation event",
        "gen_ai.evaluation",
        name_key="gen_ai.evaluation.name",
        score_key="gen_ai.evaluation.score.value",
        label_key="gen_ai.evaluation.score.label",
        response_id_key="gen_ai.response.id",
        error_key="error.type",
        evidence_class="instrumentation's own keys",
    ),
    GuardrailSpelling(
        # The security conventions' apply_guardrail span (semantic-conventions PR 3233): its
        # decision is an attribute, and the span's status stays OK when it denies.
        "OpenTelemetry GenAI semantic conventions: apply_guardrail's gen_ai.security.decision.type",
        "gen_ai.security.decision.type",
        flagged=("deny", "warn", "modify"),
        passed=("allow", "audit"),
        target_key="gen_ai.security.target.type",
        answer_targets=("llm_output",),
    ),
    GuardrailSpelling(
        # guardrails-ai's validator spans (guardrails/telemetry/validator_tracing.py): each
        # field of the ValidationResult as validator.validate.output.<field>, its outcome
        # `pass` or `fail`; the span is OpenInference's GUARDRAIL (validation).
        "guardrails-ai: a validator's outcome",
        "validator.validate.output.outcome",
        flagged=("fail",),
        passed=("pass",),
        evidence_class="framework's own keys",
    ),
    FinishSpelling("OpenAI (and the conventions' examples)", cut=("length",), refused=("content_filter",)),
    FinishSpelling("Anthropic Messages API stop reasons", cut=("max_tokens",), refused=("refusal",)),
    FinishSpelling(
        "Google Gemini finish reasons",
        cut=("MAX_TOKENS",),
        refused=("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"),
    ),
    FinishSpelling("Amazon Bedrock Converse stop reasons", refused=("guardrail_intervened", "content_filtered")),
)

EVALUATION_SPELLINGS: tuple[EvaluationSpelling, ...] = tuple(
    s for s in QUALITY_SPELLINGS if isinstance(s, EvaluationSpelling)
)
GUARDRAIL_SPELLINGS: tuple[GuardrailSpelling, ...] = tuple(
    s for s in QUALITY_SPELLINGS if isinstance(s, GuardrailSpelling)
)
CUT_FINISH_REASONS: frozenset[str] = frozenset(
    reason for s in QUALITY_SPELLINGS if isinstance(s, FinishSpelling) for reason in s.cut
)
REFUSED_FINISH_REASONS: frozenset[str] = frozenset(
    reason for s in QUALITY_SPELLINGS if isinstance(s, FinishSpelling) for reason in s.refused
)
