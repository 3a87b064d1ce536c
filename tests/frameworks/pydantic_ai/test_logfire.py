"""pydantic-ai under Logfire (`logfire.instrument_pydantic_ai()`), offline, the budget processor in Logfire's setup.

Logfire builds its own TracerProvider; the budget processor joins it through
``additional_span_processors``, as a user would add it. Nothing is sent to Logfire.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import logfire
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._core.first_token import answered_with_tool_calls_only

from ...unit.helpers import RecordingProcessor
from ..stacks import Outcome, SettledPipeline, WatchedExporter, budgets
from .test_pydantic_ai import ANSWER, MODEL_NAME, TTFT, answer, stream_answer, weather


def logfire_pipeline(max_model_calls: int) -> SettledPipeline:
    """Logfire configured offline, the budget processor in its setup as a user adds it; nothing is sent."""
    exporter = WatchedExporter()
    handed = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=budgets(max_model_calls)), SimpleSpanProcessor(exporter))
    logfire.configure(
        send_to_logfire=False,
        console=False,
        service_name="latency-budget-tests",
        additional_span_processors=[handed, processor],
    )
    return SettledPipeline(trace.get_tracer_provider(), processor, exporter, handed=handed)  # type: ignore[arg-type]


@pytest.fixture
def pipe() -> Iterator[SettledPipeline]:
    """Logfire with the budget processor, and pydantic-ai instrumented through it."""
    pipeline = logfire_pipeline(max_model_calls=2)
    logfire.instrument_pydantic_ai()
    try:
        yield pipeline
    finally:
        Agent.instrument_all(False)
        logfire.force_flush()


def run(pipe: SettledPipeline, *, stream: bool) -> Outcome:
    agent = Agent(FunctionModel(answer, stream_function=stream_answer), tools=[weather])

    async def streamed() -> str:
        async with agent.run_stream("What is the weather in Paris?") as result:
            return "".join([chunk async for chunk in result.stream_text(delta=True)])

    with logfire.span("request"):
        output = asyncio.run(streamed()) if stream else agent.run_sync("What is the weather in Paris?").output
    assert output == ANSWER
    return Outcome(pipe)


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_logfire_agent_run_is_two_model_calls_and_one_tool_call(pipe: SettledPipeline, stream: bool) -> None:
    """Under Logfire too: chat spans are model_call, execute_tool is tool_calls, counts 2 and 1, each span once."""
    outcome = run(pipe, stream=stream)
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_NAME: 2}),
        "tool_calls": Counter({"execute_tool weather": 1}),
    }
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_exported_once()


def test_logfire_streamed_run_reads_time_to_first_chunk(pipe: SettledPipeline) -> None:
    """Logfire's chat spans carry time_to_first_chunk (seconds): both give model_call's worst first token.

    The request's first token is the answering call's: the planning call streamed a tool call
    only (its gen_ai.output.messages says so), which the user never sees.
    """
    outcome = run(pipe, stream=True)
    models = [s for s in outcome.in_stage("model_call") if s.context]
    seconds = {s.context.span_id: (s.attributes or {})[TTFT] for s in models if s.context}
    assert len(seconds) == 2
    planning, answering = models
    assert answered_with_tool_calls_only(dict(planning.attributes or {}))
    assert answering.context is not None
    worst, _ = outcome.expected_first_token_ms({i: round(v * 1e9) for i, v in seconds.items()})
    answer_ns = round(seconds[answering.context.span_id] * 1e9)
    _, users = outcome.expected_first_token_ms({answering.context.span_id: answer_ns})
    assert outcome.first_token_ms() == pytest.approx((worst, users), abs=1e-3)
