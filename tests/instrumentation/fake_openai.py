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

``tool_rounds`` (1 unless a test sets it) is how many canned answers to one conversation ask
for tools before the text answer: a request is answered with tool calls while it holds fewer
assistant turns with tool calls than that (an agent loop of several iterations). Tool calls
of rounds after the first have ids of their own (``call_weather_r2_1``...).

``cached_tokens`` and ``reasoning_tokens`` (``None`` unless a test sets them) add OpenAI's
usage details to every answer's usage: ``prompt_tokens_details.cached_tokens`` (input tokens
served from the prompt cache, within ``prompt_tokens``) and
``completion_tokens_details.reasoning_tokens`` (within ``completion_tokens``).

``script`` (empty unless a test fills it) replaces the canned answers: each chat request
takes the next :class:`Turn`, tool calls (any names, any arguments, several at once) or a
text, so an agent loop can be driven through several iterations to its stop tool.

Every answer has its own response id, ``chatcmpl-fake-<n>`` (n: the answer's number since the
server started), as the API gives: an id shared by every answer would let two parallel calls
pass for one.

``served`` is the server's own record, the yardstick of the framework tests: per request,
its body, whether it streamed, the tool calls it answered, its response id, the instant it was
received, the instant its first chunk was sent and the instant its first chunk with text was
sent (``time.time_ns()``, the clock the SDK stamps spans with; a sending instant is taken just
before the write, so no client can have read the chunk earlier).
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


@dataclass(frozen=True)
class Turn:
    """One scripted answer: ``tool_calls`` as (name, JSON arguments) pairs, else ``text`` streamed word by word."""

    tool_calls: tuple[tuple[str, str], ...] = ()
    text: str = "".join(ANSWER_WORDS)


@dataclass
class Served:
    """What the server really did for one chat request (``first_text_ns`` None: it sent no text)."""

    body: dict[str, Any]
    stream: bool
    tool_calls: tuple[str, ...]
    response_id: str
    received_ns: int
    first_chunk_ns: int | None = None
    first_text_ns: int | None = None


def _round(body: dict[str, Any]) -> int:
    """How many assistant turns with tool calls the conversation already holds."""
    return sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant" and m.get("tool_calls"))


def _wants_tool_call(body: dict[str, Any], tool_rounds: int = 1) -> bool:
    messages = body.get("messages") or []
    if tool_rounds == 1:
        return bool(body.get("tools")) and not any(m.get("role") == "tool" for m in messages)
    return bool(body.get("tools")) and _round(body) < tool_rounds


PROMPT_TOKENS = 12


def usage(cached_tokens: int | None = None, reasoning_tokens: int | None = None) -> dict[str, Any]:
    """An answer's usage, with OpenAI's details where given."""
    found: dict[str, Any] = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": len(ANSWER_WORDS),
        "total_tokens": PROMPT_TOKENS + len(ANSWER_WORDS),
    }
    if cached_tokens is not None:
        found["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens is not None:
        found["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return found


def _arguments(index: int) -> str:
    """The arguments of the canned answer's tool call ``index`` (0: Paris)."""
    return TOOL_ARGUMENTS if index == 0 else json.dumps({"city": TOOL_CITIES[index % len(TOOL_CITIES)]})


def _turn(body: dict[str, Any], tool_calls: int, tool_rounds: int = 1) -> Turn:
    """The canned answer to a request body when no script is set."""
    if _wants_tool_call(body, tool_rounds):
        return Turn(tool_calls=tuple((TOOL_NAME, _arguments(index)) for index in range(tool_calls)))
    return Turn()


def _call_id(index: int, round_index: int = 0) -> str:
    """The id of an answer's tool call ``index`` (0 in the first round: ``TOOL_CALL_ID``)."""
    if round_index:
        return f"call_weather_r{round_index + 1}_{index + 1}"
    return f"call_weather_{index + 1}"


def completion(
    body: dict[str, Any],
    tool_calls: int = 1,
    turn: Turn | None = None,
    response_id: str = "chatcmpl-fake-1",
    used: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` answer to a body (``turn``: the scripted one, ``used`` its usage)."""
    turn = turn or _turn(body, tool_calls)
    round_index = _round(body)
    if turn.tool_calls:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": _call_id(index, round_index),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for index, (name, arguments) in enumerate(turn.tool_calls)
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": turn.text}
        finish = "stop"
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": used or usage(),
    }


def chunks(
    body: dict[str, Any],
    tool_calls: int = 1,
    turn: Turn | None = None,
    response_id: str = "chatcmpl-fake-1",
    used: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in order (``turn``: the scripted one)."""
    turn = turn or _turn(body, tool_calls)
    round_index = _round(body)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    if turn.tool_calls:
        for index, (name, arguments) in enumerate(turn.tool_calls):
            opening = {
                "index": index,
                "id": _call_id(index, round_index),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            delta: dict[str, Any] = {"tool_calls": [opening]}
            if index == 0:
                delta = {"role": "assistant", "content": None, **delta}
            yield chunk(delta)
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": ""})
        for word in _words(turn.text):
            yield chunk({"content": word})
        yield chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        final = chunk({})
        final["choices"] = []
        final["usage"] = used or usage()
        yield final


def _words(text: str) -> list[str]:
    """``text`` in chunks of one word each (with its trailing space), as a model streams it."""
    words = text.split(" ")
    return [word + " " for word in words[:-1]] + [words[-1]]


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAIServer

    def do_POST(self) -> None:
        received_ns = time.time_ns()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        turn = self.server.next_turn(body)
        self._answer(body, turn, self.server.record(body, turn, received_ns))

    def _answer(self, body: dict[str, Any], turn: Turn, served: Served) -> None:
        if body.get("model") == PAIRED_MODEL:
            try:
                self.server.pair.wait()
            except threading.BrokenBarrierError:
                self.server.pair.reset()  # ready for the next pair
                self._send_json(504, {"error": {"message": "no second paired request", "type": "timeout"}})
                return
        if not body.get("stream"):
            served.first_chunk_ns = time.time_ns()
            if not turn.tool_calls:
                served.first_text_ns = served.first_chunk_ns
            answer = completion(body, self.server.tool_calls, turn, served.response_id, self.server.usage())
            self._send_json(200, answer)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        if self.server.first_chunk_delay_s > 0:
            time.sleep(self.server.first_chunk_delay_s)  # the model's time to its first token
        for item in chunks(body, self.server.tool_calls, turn, served.response_id, self.server.usage()):
            if served.first_chunk_ns is None:
                served.first_chunk_ns = time.time_ns()
            if served.first_text_ns is None and any((c.get("delta") or {}).get("content") for c in item["choices"]):
                served.first_text_ns = time.time_ns()  # taken before the write: no client can read it earlier
            self.wfile.write(b"data: " + json.dumps(item).encode() + b"\n\n")
            self.wfile.flush()
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
    """The HTTP server; ``requests`` holds the JSON body of every chat request received, ``served`` its truth."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.served: list[Served] = []
        self.script: list[Turn] = []
        self.first_chunk_delay_s = 0.0
        self.tool_calls = 1
        self.tool_rounds = 1
        self.cached_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self._answers = 0
        self.pair = threading.Barrier(2, timeout=PAIR_TIMEOUT_S)
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give ``openai.OpenAI``."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def usage(self) -> dict[str, Any]:
        """The usage every answer reports now (with the details a test set)."""
        return usage(self.cached_tokens, self.reasoning_tokens)

    def next_turn(self, body: dict[str, Any]) -> Turn:
        """The next scripted turn, or the canned answer when the script is empty."""
        with self._lock:
            return self.script.pop(0) if self.script else _turn(body, self.tool_calls, self.tool_rounds)

    def record(self, body: dict[str, Any], turn: Turn | None = None, received_ns: int | None = None) -> Served:
        """Log one chat request and give its answer the next response id."""
        turn = turn or _turn(body, self.tool_calls, self.tool_rounds)
        with self._lock:
            self._answers += 1
            served = Served(
                body,
                bool(body.get("stream")),
                tuple(name for name, _ in turn.tool_calls),
                f"chatcmpl-fake-{self._answers}",
                time.time_ns() if received_ns is None else received_ns,
            )
            self.requests.append(body)
            self.served.append(served)
        return served

    def clear(self) -> None:
        """Forget the requests served so far and any script left."""
        with self._lock:
            self.requests.clear()
            self.served.clear()
            self.script.clear()


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
