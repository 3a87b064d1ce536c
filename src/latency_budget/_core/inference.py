"""Where a model call's time goes: network and client, queueing, prompt processing, generation.

Where the inference server traces its side in the same trace (vLLM and SGLang write
``gen_ai.latency.*`` in seconds on their own request span, under the client's call by
the propagated trace context), a model call splits into the server's queue, prefill
(prompt processing) and decode (generation) times, and the rest of the client's span:
network and client overhead (the call's duration less the server's end-to-end time).
Where only the client traces, its first token and its output tokens say what they can:
the time before the first token (network, queueing and prompt processing together) and
the generation after it, with the output rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from latency_budget._core.call_facts import RawCall
from latency_budget._core.first_token import not_a_generation

__all__ = ["SERVER_E2E", "InferenceSplit", "ServerSpan", "inference_split"]

# vllm/tracing.py SpanAttributes (and SGLang's copy): seconds, on the server's `llm_request` span.
SERVER_E2E = "gen_ai.latency.e2e"
SERVER_QUEUE = "gen_ai.latency.time_in_queue"
SERVER_PREFILL = "gen_ai.latency.time_in_model_prefill"
SERVER_DECODE = "gen_ai.latency.time_in_model_decode"
# Output tokens as the conventions write them, then as vLLM writes them on its server span.
_OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")

# An inference server's span in the judged trace: the ids of its ancestors (nearest first,
# across process boundaries), and its attributes.
ServerSpan = tuple[tuple[int, ...], Mapping[str, object]]


@dataclass(slots=True)
class InferenceSplit:
    """A request's model calls split by where their time went, in milliseconds, summed over its calls.

    ``server_calls`` were traced by the inference server too: ``overhead_ms`` (network and
    client), ``queue_ms`` and ``prompt_ms`` (prefill) are theirs. ``client_calls`` were
    traced by the client only, with a first token: ``before_first_token_ms`` is theirs
    (network, queueing and prompt processing, not told apart). ``generation_ms`` is both's
    (the server's decode time, or the client's time after its first token), and
    ``output_tokens_per_s`` the output tokens over it, where every such call counts them.
    Built once per request (slotted, not frozen, as the report: cheaper to build); read-only.
    """

    server_calls: int = 0
    client_calls: int = 0
    overhead_ms: float = 0.0
    queue_ms: float = 0.0
    prompt_ms: float = 0.0
    before_first_token_ms: float = 0.0
    generation_ms: float = 0.0
    output_tokens_per_s: float | None = None


def inference_split(calls: Sequence[RawCall], servers: Sequence[ServerSpan]) -> InferenceSplit | None:
    """The split of ``calls`` (a request's outermost stage calls) that are model calls; None when none says anything.

    A server span belongs to its nearest ancestor among the model calls (retrieval and
    tool calls are passed over: a tool that calls a model holds that model call); a call
    with no server span counts when it has a first token (only model calls read one).
    """
    # A call with a first token is a model call (first tokens are read on nothing else), so
    # the operations are looked at only where a server span has to find its call.
    models = calls
    by_call: dict[int, Mapping[str, object]] = {}
    if servers:
        models = [call for call in calls if not not_a_generation(call[5])]
        ids = {call[0] for call in models}
        for ancestors, attributes in servers:
            for ancestor in ancestors:
                if ancestor in ids:
                    by_call.setdefault(ancestor, attributes)
                    break
    # Sums in whole nanoseconds: the same whatever order the calls were recorded in (live
    # and replayed reports are equal), where float sums are not.
    server_calls = client_calls = 0
    overhead = queue = prompt = before = generation = 0
    tokens = 0
    tokens_known = True
    for span_id, _, start, end, ttft, attributes in models:
        duration = max(0, end - start)
        server = by_call.get(span_id)
        if server is not None:
            e2e = _ns(server.get(SERVER_E2E))
            if e2e is None:
                continue
            server_calls += 1
            overhead += max(0, duration - e2e)
            queue += _ns(server.get(SERVER_QUEUE)) or 0
            prompt += _ns(server.get(SERVER_PREFILL)) or 0
            generation += _ns(server.get(SERVER_DECODE)) or 0
            counted = _tokens(attributes) or _tokens(server)
        elif ttft is not None:
            client_calls += 1
            first = min(ttft, duration)
            before += first
            generation += duration - first
            counted = _tokens(attributes)
        else:
            continue
        if counted is None:
            tokens_known = False
        else:
            tokens += counted
    if not server_calls and not client_calls:
        return None
    rate = tokens * 1e9 / generation if tokens_known and tokens and generation > 0 else None
    return InferenceSplit(
        server_calls,
        client_calls,
        overhead / 1e6,
        queue / 1e6,
        prompt / 1e6,
        before / 1e6,
        generation / 1e6,
        rate,
    )


def _ns(seconds: object) -> int | None:
    """A server's duration in seconds as whole nanoseconds; None when it is no usable number."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e9:
        return None
    return round(seconds * 1e9)


def _tokens(attributes: Mapping[str, object]) -> int | None:
    for key in _OUTPUT_TOKENS:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
