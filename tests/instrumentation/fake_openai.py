"""A small OpenAI-compatible chat-completions server on loopback, for the real ``openai`` client.

Canned answers: a request that offers ``tools`` and has no tool result yet gets one
``get_weather`` tool call; every other request gets a short text answer. ``"stream": true``
answers as server-sent events, chunk by chunk, with ``[DONE]`` at the end. The
subprocess tests reach the server run by the test process over loopback.

A request for model ``PAIRED_MODEL`` is answered only once another such request has
arrived: two of them are certainly in flight together, so their spans overlap, without
any sleep.

``tool_calls`` (1 unless a test sets it) is how many ``get_weather`` calls that answer asks
for at once, one city each (:data:`TOOL_CITIES`), ids ``call_weather_1``, ``call_weather_2``...

``first_chunk_delay_s`` (0 unless a test sets it) holds a streamed answer's first chunk back
that long, as a real model's first token takes time: a framework that records time to first
byte in whole milliseconds and drops 0 (Strands Agents) then always writes it.

``tool_rounds`` (1 unless a test sets it) is how many answers to one conversation ask for tools
before the text answer: a request is answered with tool calls while it holds fewer assistant
turns with tool calls than that (an agent loop of several iterations).

``sent`` is the truth a fidelity test holds spans against: one :class:`Sent` per chat request,
in arrival order, with the instant it arrived, the instant its first chunk was sent and the
instant its first text chunk was sent (``time.time_ns()``, the clock the SDK stamps spans with;
``None`` for an answer with tool calls only).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-fake-1"
PAIRED_MODEL = "gpt-fake-paired"
PAIR_TIMEOUT_S = 30.0
ANSWER_WORDS = ("It ", "is ", "sunny ", "in ", "Paris.")
TOOL_NAME = "get_weather"
TOOL_CALL_ID = "call_weather_1"
TOOL_ARGUMENTS = '{"city": "Paris"}'
TOOL_CITIES = ("Paris", "London", "Rome")
CREATED = 1_700_000_000


@dataclass
class Sent:
    """One chat request received, and when its answer's first chunk and first text were sent (ns)."""

    body: dict[str, Any]
    received_ns: int
    first_chunk_ns: int | None = None
    first_text_ns: int | None = None


def _wants_tool_call(body: dict[str, Any], tool_rounds: int = 1) -> bool:
    messages = body.get("messages") or []
    if tool_rounds == 1:
        return bool(body.get("tools")) and not any(m.get("role") == "tool" for m in messages)
    done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    return bool(body.get("tools")) and done < tool_rounds


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 12, "completion_tokens": len(ANSWER_WORDS), "total_tokens": 12 + len(ANSWER_WORDS)}


def _tool_call(index: int, round_index: int = 0) -> tuple[str, str]:
    """The id and the arguments of the answer's tool call ``index`` (0: ``TOOL_CALL_ID``, Paris).

    Tool rounds after the first have ids of their own: ``call_weather_r2_1``...
    """
    arguments = TOOL_ARGUMENTS if index == 0 else json.dumps({"city": TOOL_CITIES[index % len(TOOL_CITIES)]})
    if round_index:
        return f"call_weather_r{round_index + 1}_{index + 1}", arguments
    return (TOOL_CALL_ID if index == 0 else f"call_weather_{index + 1}"), arguments


def _round(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant" and m.get("tool_calls"))


def completion(body: dict[str, Any], tool_calls: int = 1, tool_rounds: int = 1) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` answer to a request body."""
    if _wants_tool_call(body, tool_rounds):
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": TOOL_NAME, "arguments": arguments}}
                for call_id, arguments in (_tool_call(index, _round(body)) for index in range(tool_calls))
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "".join(ANSWER_WORDS)}
        finish = "stop"
    return {
        "id": "chatcmpl-fake-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(),
    }


def chunks(body: dict[str, Any], tool_calls: int = 1, tool_rounds: int = 1) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in order."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake-stream-1",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    if _wants_tool_call(body, tool_rounds):
        for index in range(tool_calls):
            call_id, arguments = _tool_call(index, _round(body))
            opening = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": ""},
            }
            delta: dict[str, Any] = {"tool_calls": [opening]}
            if index == 0:
                delta = {"role": "assistant", "content": None, **delta}
            yield chunk(delta)
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": ""})
        for word in ANSWER_WORDS:
            yield chunk({"content": word})
        yield chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        final = chunk({})
        final["choices"] = []
        final["usage"] = _usage()
        yield final


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAIServer

    def do_POST(self) -> None:
        received_ns = time.time_ns()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        sent = self.server.record(body, received_ns)
        if body.get("model") == PAIRED_MODEL:
            try:
                self.server.pair.wait()
            except threading.BrokenBarrierError:
                self.server.pair.reset()  # ready for the next pair
                self._send_json(504, {"error": {"message": "no second paired request", "type": "timeout"}})
                return
        if not body.get("stream"):
            answer = completion(body, self.server.tool_calls, self.server.tool_rounds)
            sent.first_chunk_ns = time.time_ns()
            if answer["choices"][0]["message"]["content"]:
                sent.first_text_ns = sent.first_chunk_ns
            self._send_json(200, answer)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        if self.server.first_chunk_delay_s > 0:
            time.sleep(self.server.first_chunk_delay_s)  # the model's time to its first token
        for item in chunks(body, self.server.tool_calls, self.server.tool_rounds):
            self.wfile.write(b"data: " + json.dumps(item).encode() + b"\n\n")
            self.wfile.flush()
            instant = time.time_ns()
            if sent.first_chunk_ns is None:
                sent.first_chunk_ns = instant
            if sent.first_text_ns is None and any((c.get("delta") or {}).get("content") for c in item["choices"]):
                sent.first_text_ns = instant
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean


class FakeOpenAIServer(ThreadingHTTPServer):
    """The HTTP server; ``requests`` holds the JSON body of every chat request received, ``sent`` its truth."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.sent: list[Sent] = []
        self.first_chunk_delay_s = 0.0
        self.tool_calls = 1
        self.tool_rounds = 1
        self.pair = threading.Barrier(2, timeout=PAIR_TIMEOUT_S)
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give ``openai.OpenAI``."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def record(self, body: dict[str, Any], received_ns: int) -> Sent:
        sent = Sent(body, received_ns)
        with self._lock:
            self.requests.append(body)
            self.sent.append(sent)
        return sent


@contextmanager
def serve() -> Iterator[FakeOpenAIServer]:
    """Run the server on a free loopback port in a background thread for the block."""
    server = FakeOpenAIServer()
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
