"""The attribute and event names this package writes: a public, versioned contract.

Dashboards, Jaeger searches and alerts are built on these names, so they change only
with a new :data:`CONTRACT_VERSION`, and docs/attributes.md says what changed.
"""

from __future__ import annotations

__all__ = [
    "ACTUAL_MS",
    "AGENT_INFERENCE_CALLS",
    "AGENT_TOOL_CALLS",
    "BUDGET_MS",
    "CALLS",
    "CONTRACT_VERSION",
    "CRITICAL_STAGE",
    "HINT_BASIS",
    "HINT_BASIS_COUNT",
    "HINT_EVENT",
    "HINT_KIND",
    "HINT_SAVINGS_MS",
    "HINT_SPAN_COUNT",
    "HINT_SPAN_IDS",
    "HINT_SPAN_NAMES",
    "INFERENCE_BEFORE_FIRST_TOKEN_MS",
    "INFERENCE_CLIENT_CALLS",
    "INFERENCE_GENERATION_MS",
    "INFERENCE_OUTPUT_TOKENS_PER_S",
    "INFERENCE_OVERHEAD_MS",
    "INFERENCE_PROMPT_MS",
    "INFERENCE_QUEUE_MS",
    "INFERENCE_SERVER_CALLS",
    "KIND",
    "MAX_CALLS",
    "OVER_BUDGET_STAGES",
    "OVER_MS",
    "PARTIAL",
    "PARTIAL_REASON",
    "PROFILE",
    "SEVERITY",
    "STAGE",
    "STAGE_BUDGET_MS",
    "TOTAL",
    "TOTAL_ACTUAL_MS",
    "TOTAL_BUDGET_MS",
    "TOTAL_FIRST_TOKEN_MS",
    "TRUNCATED",
    "UNATTRIBUTED_MS",
    "VERDICT",
    "VIOLATED",
    "VIOLATION_EVENT",
    "WARNED",
    "WARN_STAGES",
    "WITHIN_BUDGET",
    "stage_key",
]

# 1: the first release. 2: the verdict first (VERDICT), request-level names under
# "total." (TOTAL_FIRST_TOKEN_MS), the stage budget on stage spans as STAGE_BUDGET_MS,
# a stage's worst time to first token as stages.<stage>.worst_first_token_ms, "total"
# in OVER_BUDGET_STAGES / WARN_STAGES, hints that name their spans, values in ms rounded
# to microseconds, events stamped where Jaeger shows them. 3: where the model calls' time
# went, under "inference." (INFERENCE_*), and an agent's own call counts where they
# disagree with the counted calls (AGENT_*); nothing of version 2 changed. 4: a trace
# `serve` judged or forwarded on part of its spans is marked (PARTIAL, PARTIAL_REASON);
# nothing of version 3 changed.
CONTRACT_VERSION = 4

PREFIX = "latency_budget."
TOTAL = "total"  # the "stage" of the request-level budgets (total_ms, first_token_ms)

# On every stage span, set when it starts: its stage, and the stage's budget for the
# whole request (all of the stage's spans in the trace together, as a wall-clock union).
STAGE = "latency_budget.stage"
STAGE_BUDGET_MS = "latency_budget.stage_budget_ms"
# On a violation event, the stage's (or the request's) actual; on a stage span that alone
# is over its stage's budget, next to VIOLATED (or WARNED), that span's own duration.
ACTUAL_MS = "latency_budget.actual_ms"

# On the local root (and, for VIOLATED/WARNED, on a stage span over its stage's budget).
VERDICT = "latency_budget.verdict"  # one line for people: "OVER BUDGET: model_call +475.758 ms (...)"
VIOLATED = "latency_budget.violated"
WARNED = "latency_budget.warned"
OVER_BUDGET_STAGES = "latency_budget.over_budget_stages"
WARN_STAGES = "latency_budget.warn_stages"
TOTAL_BUDGET_MS = "latency_budget.total.budget_ms"
TOTAL_ACTUAL_MS = "latency_budget.total.actual_ms"
TOTAL_FIRST_TOKEN_MS = "latency_budget.total.first_token_ms"  # the request's: root start -> first token
PROFILE = "latency_budget.profile"
TRUNCATED = "latency_budget.truncated"
UNATTRIBUTED_MS = "latency_budget.unattributed_ms"
CRITICAL_STAGE = "latency_budget.critical_stage"

# Written by `serve` only (see _serve/partial.py): on a judged root whose trace lacked spans
# (a parent never arrived), and on the spans it forwarded knowing their trace was partial
# (late spans; the top spans of a part that came without its root). The reason is one of
# _serve.partial.PARTIAL_REASONS: missing_parent, late_spans, no_root.
PARTIAL = "latency_budget.partial"
PARTIAL_REASON = "latency_budget.partial.reason"

# On the local root, where its model calls' time went (summed over them; see
# _core/inference.py): calls traced by the inference server too (vLLM, SGLang) and by the
# client only, then milliseconds of network and client overhead, queueing and prompt
# processing (server-traced calls), before the first token (client-only calls: the three
# together), generation (both), and the output rate over generation.
INFERENCE_SERVER_CALLS = "latency_budget.inference.server_calls"
INFERENCE_CLIENT_CALLS = "latency_budget.inference.client_calls"
INFERENCE_OVERHEAD_MS = "latency_budget.inference.overhead_ms"
INFERENCE_QUEUE_MS = "latency_budget.inference.queue_ms"
INFERENCE_PROMPT_MS = "latency_budget.inference.prompt_ms"
INFERENCE_BEFORE_FIRST_TOKEN_MS = "latency_budget.inference.before_first_token_ms"
INFERENCE_GENERATION_MS = "latency_budget.inference.generation_ms"
INFERENCE_OUTPUT_TOKENS_PER_S = "latency_budget.inference.output_tokens_per_s"

# On the local root, when the root carries an agent's own counts of its calls (the
# conventions' gen_ai.invoke_agent.inference_calls and .tool_calls, which GitHub Copilot's
# CLI writes on its spans) and they differ from the calls counted in model_call or
# tool_calls: the agent's count, so that the disagreement shows (one of the two is wrong).
AGENT_INFERENCE_CALLS = "latency_budget.agent.inference_calls"
AGENT_TOOL_CALLS = "latency_budget.agent.tool_calls"

# The span event for each place where time could be won.
HINT_EVENT = "latency_budget.hint"
HINT_KIND = "latency_budget.hint.kind"
HINT_SPAN_COUNT = "latency_budget.hint.span_count"
HINT_SAVINGS_MS = "latency_budget.hint.potential_savings_ms"
HINT_SPAN_NAMES = "latency_budget.hint.span_names"  # at most 5 names, in start order
HINT_SPAN_IDS = "latency_budget.hint.span_ids"  # the same spans' ids, hex, separated by spaces
HINT_BASIS_COUNT = "latency_budget.hint.basis_count"  # calls an estimated lever rests on
HINT_BASIS = "latency_budget.hint.basis"  # what an estimate rests on (model_choice, cache, context_size)

# The span event (and log record) for each violation.
VIOLATION_EVENT = "latency_budget.violation"
KIND = "latency_budget.kind"
SEVERITY = "latency_budget.severity"
BUDGET_MS = "latency_budget.budget_ms"  # the budget that was broken
OVER_MS = "latency_budget.over_ms"
MAX_CALLS = "latency_budget.max_calls"
CALLS = "latency_budget.calls"

# Metric attribute only (latency_budget.requests): whether the request stayed within the budget.
WITHIN_BUDGET = "latency_budget.within_budget"


def stage_key(stage: str, field: str) -> str:
    """``latency_budget.stages.<stage>.<field>``, e.g. ``...stages.model_call.actual_ms``."""
    return f"latency_budget.stages.{stage}.{field}"
