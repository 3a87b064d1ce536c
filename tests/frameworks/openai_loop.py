"""A user's own agent loop on the real ``openai`` client, for the stacks whose framework is a retriever.

It retrieves once (the stack's vector search), then streams model calls from the fake OpenAI
server and runs the ``get_weather`` calls each one asks for on threads of their own, each in
an ``execute_tool`` span it writes by the GenAI conventions, until the model answers. The
tool records every run (:class:`~tests.frameworks.truth.Runs`), and the calls of one round
wait for each other, so they were certainly in flight together. Imported only by stacks
whose environment has ``openai``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import Any

import openai
from opentelemetry.trace import Tracer

from ..instrumentation.fake_openai import MODEL, TOOL_NAME
from .truth import Runs

SEARCH = "vector_search"  # the name the retrieval step's runs are recorded under
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


class Answer:
    """A streamed answer assembled chunk by chunk: its text and its tool calls."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        for choice in chunk.choices:
            if choice.delta.content:
                self.text.append(choice.delta.content)
            for delta in choice.delta.tool_calls or ():
                call = self.calls.setdefault(
                    delta.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = delta.id or call["id"]
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""

    def result(self) -> tuple[str, list[dict[str, Any]]]:
        return "".join(self.text), [self.calls[i] for i in sorted(self.calls)]


async def stream_async(
    model: openai.AsyncOpenAI, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    """One streamed call on the async client: its text and its tool calls."""
    stream = await model.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        stream=True,
    )
    answer = Answer()
    async for chunk in stream:
        answer.add(chunk)
    return answer.result()


class Agent:
    """Retrieve, then stream model calls and run the tools they ask for in parallel, until the model answers."""

    def __init__(
        self,
        tracer: Tracer,
        model: openai.OpenAI,
        runs: Runs,
        *,
        parallel: int,
        retrieve: Callable[[str], list[str]],
    ) -> None:
        self.tracer, self.model, self.runs, self.retrieve = tracer, model, runs, retrieve
        self.parallel = parallel
        self.together = threading.Barrier(parallel, timeout=30)  # a round's tool calls are in flight together

    def get_weather(self, city: str) -> str:
        with self.runs.run(TOOL_NAME, city):
            self.together.wait()
            return f"sunny in {city}"

    def _tool(self, call: dict[str, Any]) -> dict[str, Any]:
        name = call["function"]["name"]
        with self.tracer.start_as_current_span(
            f"execute_tool {name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call["id"],
            },
        ):
            result = self.get_weather(**json.loads(call["function"]["arguments"]))
        return {"role": "tool", "tool_call_id": call["id"], "content": result}

    def _stream(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """One streamed call: its text and its tool calls (assembled from the chunks)."""
        stream = self.model.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
        answer = Answer()
        for chunk in stream:
            answer.add(chunk)
        return answer.result()

    def answer(self, question: str) -> str:
        with self.runs.run(SEARCH, question):
            notes = self.retrieve(question)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Notes: " + " ".join(notes)},
            {"role": "user", "content": question},
        ]
        with ThreadPoolExecutor(self.parallel) as pool:
            while True:
                text, calls = self._stream(messages)
                if not calls:
                    return text
                messages.append({"role": "assistant", "content": None, "tool_calls": calls})
                # Each tool runs on a thread of its own, in the loop's context (so under the request).
                futures = [pool.submit(copy_context().run, self._tool, call) for call in calls]
                messages.extend(future.result() for future in futures)
