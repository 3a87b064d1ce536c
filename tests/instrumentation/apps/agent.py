"""A small tool-using agent request, run under ``opentelemetry-instrument`` by the tests.

One request span (the local root) around: a streamed chat completion that asks for a
tool, the tool's execution (an ``execute_tool`` span from the OpenTelemetry GenAI utils,
as the semantic conventions shape it), and a second, non-streamed completion with the
tool's result. The ``openai`` client reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``;
the tests point it at their fake server.
"""

from __future__ import annotations

import json

import openai
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.util.genai.handler import TelemetryHandler

MODEL = "gpt-fake-1"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def main() -> None:
    client = openai.OpenAI()
    tracer = trace.get_tracer("agent-app")
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER):
        messages: list[dict[str, object]] = [{"role": "user", "content": "What is the weather in Paris?"}]
        stream = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True)
        calls: dict[int, dict[str, str]] = {}
        for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function is not None:
                        entry["name"] = call.function.name or entry["name"]
                        entry["arguments"] += call.function.arguments or ""
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls.values()
                ],
            }
        )
        handler = TelemetryHandler()
        for call in calls.values():
            with handler.tool(call["name"], tool_type="function") as invocation:
                invocation.tool_call_id = call["id"]
                result = get_weather(**json.loads(call["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)


if __name__ == "__main__":
    main()
