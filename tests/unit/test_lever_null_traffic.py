"""Long null traffic: the processor's context and output hints are as rare as ``report``'s on the same spans.

Each model's time has no relation to its tokens. Every model gets hundreds of calls, so
its recent-call statistics are refreshed many times and its fits are re-tested; the
processor's hints (a real SDK pipeline, explicit timestamps) and ``report``'s findings
(the replay of the very spans it exported) are counted per request.
"""

from __future__ import annotations

import random

from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._core.levers import RecordedBaseline, request_levers
from latency_budget._replay import evaluate_spans, record_of

from .helpers import at, pipeline
from .test_lever_hints import BUDGETS, chat

TOKEN_KINDS = ("context_size", "output_length")
PROCESSORS = 2  # each with its own recent calls
MODELS = 16  # per processor (at most 32 series are remembered)
CALLS = 384  # per model: its fits tested at 64 calls, then checked again at each of 3 refreshes of 128 calls


def _null_traffic(seed: int) -> tuple[dict[str, int], dict[str, int], dict[str, set[str]], dict[str, set[str]], int]:
    """Requests of one call each, to a model chosen at random; times drawn independently of the tokens.

    Half the models stream (their first chunk drawn independently too). Returns per kind the
    requests with a hint in process and in ``report``, the models concerned in each, and the
    number of requests.
    """
    rng = random.Random(seed)
    config = load_budgets(text=BUDGETS)
    in_process = dict.fromkeys(TOKEN_KINDS, 0)
    replayed = dict.fromkeys(TOKEN_KINDS, 0)
    models_in: dict[str, set[str]] = {kind: set() for kind in TOKEN_KINDS}
    models_replayed: dict[str, set[str]] = {kind: set() for kind in TOKEN_KINDS}
    requests = 0
    for proc in range(PROCESSORS):
        p = pipeline(BUDGETS)
        names = [f"p{proc}-m{m}" for m in range(MODELS)]
        order = [name for name in names for _ in range(CALLS)]
        rng.shuffle(order)
        model_of: dict[int, str] = {}
        now = 0.0
        for index, model in enumerate(order):
            duration = rng.lognormvariate(6, 0.4)
            streamed = names.index(model) % 2 == 0
            first = min(duration, rng.lognormvariate(5, 0.4)) / 1000 if streamed else None
            tokens: dict[str, AttributeValue] = {
                "gen_ai.usage.input_tokens": rng.randint(100, 5000),
                "gen_ai.usage.output_tokens": rng.randint(10, 800),
            }
            root = p.start(f"request {index}", now)
            p.run(
                "chat",
                now + 1,
                now + 1 + duration,
                parent=root,
                attributes=chat(model, stream=streamed, ttft_s=first, **tokens),
            )
            root.end(end_time=at(now + 2 + duration))
            model_of[root.get_span_context().span_id] = model
            now += duration + 10
        spans = p.finished()
        for span in spans:
            if span.parent is None and span.context is not None:
                requests += 1
                kinds = {
                    str((e.attributes or {}).get(attr.HINT_KIND)) for e in span.events if e.name == attr.HINT_EVENT
                }
                for kind in TOKEN_KINDS:
                    if kind in kinds:
                        in_process[kind] += 1
                        models_in[kind].add(model_of[span.context.span_id])
        reports = evaluate_spans(config, [record_of(span) for span in spans])
        baseline = RecordedBaseline(call for report in reports for call in report.calls)
        for report in reports:
            for finding in request_levers(report.calls, report, baseline):
                if finding.kind in TOKEN_KINDS:
                    replayed[finding.kind] += 1
                    models_replayed[finding.kind].update(finding.targets)
    return in_process, replayed, models_in, models_replayed, requests


def test_on_long_null_traffic_in_process_hints_are_as_rare_as_reports() -> None:
    """12,288 requests over 32 models, each refreshed 8 times: per kind, the share of requests with a context or
    output hint in process is within one percentage point of report's, both stay under one percent, and no
    more than one model in 32 gets such a hint in process than in report."""
    in_process, replayed, models_in, models_replayed, requests = _null_traffic(20250)
    assert requests == PROCESSORS * MODELS * CALLS
    for kind in TOKEN_KINDS:
        ours, theirs = in_process[kind] / requests, replayed[kind] / requests
        assert abs(ours - theirs) <= 0.01, (kind, in_process, replayed)
        assert ours <= 0.01, (kind, in_process, replayed)
        assert theirs <= 0.01, (kind, in_process, replayed)
        assert len(models_in[kind]) <= len(models_replayed[kind]) + 1, (kind, models_in, models_replayed)
