"""A small Anthropic-compatible Messages API server on loopback, for the real ``anthropic`` client.

It is the model: what it logs is the truth the framework tests hold the spans against. Each
``POST /v1/messages`` is one :class:`Received` in :attr:`FakeAnthropicServer.log`, with the
instant (``time.time_ns()``, the clock the OpenTelemetry SDK stamps spans with) it arrived,
the instant its first event was sent and the instant its first text chunk was sent (``None``
for an answer without text).

Canned answers: a request that offers ``tools`` and holds fewer assistant turns with
``tool_use`` blocks than :attr:`FakeAnthropicServer.tool_rounds` is answered with
:attr:`FakeAnthropicServer.tool_calls` parallel ``get_weather`` tool-use blocks (stop reason
``tool_use``, no text block at all: a planning call that streams only tool calls); every
other request gets :data:`ANSWER_WORDS` as text (stop reason ``end_turn``). ``"stream": true``
answers as the API's server-sent events: ``message_start``, ``content_block_start``, the
deltas (``text_delta`` or ``input_json_delta``), ``content_block_stop``, ``message_delta``
(stop reason, usage), ``message_stop``.

``first_chunk_delay_s`` holds a streamed answer's first event back that long, as a real
model's first token takes time.
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

MODEL = "claude-fake-1"
ANSWER_WORDS = ("It ", "is ", "sunny ", "in ", "Paris ", "and ", "Rome.")
TOOL_NAME = "get_weather"
TOOL_CITIES = ("Paris", "Rome", "London")
INPUT_TOKENS = 21


@dataclass
class Received:
    """One request the server received, and when it answered it (``time.time_ns()`` instants)."""

    body: dict[str, Any]
    received_ns: int
    number: int  # 1 for the first request received, and so on: the answer's id is msg_fake_<number>
    first_event_ns: int | None = None  # the first byte of the answer's body
    first_text_ns: int | None = None  # the first text chunk (None: the answer had no text)

    @property
    def wants_tools(self) -> bool:
        return self.first_text_ns is None


def _tool_rounds_done(body: dict[str, Any]) -> int:
    return sum(
        1
        for message in body.get("messages") or []
        if message.get("role") == "assistant"
        and isinstance(message.get("content"), list)
        and any(isinstance(block, dict) and block.get("type") == "tool_use" for block in message["content"])
    )


def tool_use_blocks(round_index: int, count: int) -> list[dict[str, Any]]:
    """The tool-use blocks of tool round ``round_index``: ``count`` cities, ids ``toolu_<round>_<n>``."""
    return [
        {
            "type": "tool_use",
            "id": f"toolu_{round_index + 1}_{n + 1}",
            "name": TOOL_NAME,
            "input": {"city": TOOL_CITIES[n % len(TOOL_CITIES)]},
        }
        for n in range(count)
    ]


def _message(
    body: dict[str, Any], content: list[dict[str, Any]], stop_reason: str | None, output: int, number: int
) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{number}",  # each answer its own id, as the API gives
        "type": "message",
        "role": "assistant",
        "model": body.get("model", MODEL),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": output},
    }


def _events(
    body: dict[str, Any], blocks: list[dict[str, Any]] | None, number: int
) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(event name, data, whether it carries text) of a streamed answer, in order.

    ``message_start`` carries ``output_tokens`` 1 and ``message_delta`` the final count, as the API's do.
    """
    yield "message_start", {"type": "message_start", "message": _message(body, [], None, 1, number)}, False
    if blocks is None:
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            False,
        )
        for word in ANSWER_WORDS:
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}
            yield "content_block_delta", delta, True
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}, False
        stop, output = "end_turn", len(ANSWER_WORDS)
    else:
        for index, block in enumerate(blocks):
            opening = {**block, "input": {}}
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
                False,
            )
            partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": partial}, False
            yield "content_block_stop", {"type": "content_block_stop", "index": index}, False
        stop, output = "tool_use", 9 * len(blocks)
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": output},
        },
        False,
    )
    yield "message_stop", {"type": "message_stop"}, False


class _Handler(BaseHTTPRequestHandler):
    server: FakeAnthropicServer

    def do_POST(self) -> None:
        received_ns = time.time_ns()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") != "/v1/messages":
            self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
            return
        entry = self.server.record(body, received_ns)
        done = _tool_rounds_done(body)
        blocks = (
            tool_use_blocks(done, self.server.tool_calls)
            if body.get("tools") and done < self.server.tool_rounds
            else None
        )
        if not body.get("stream"):
            if blocks is None:
                entry.first_text_ns = time.time_ns()
                text = [{"type": "text", "text": "".join(ANSWER_WORDS)}]
                message = _message(body, text, "end_turn", len(ANSWER_WORDS), entry.number)
            else:
                message = _message(body, blocks, "tool_use", 9 * len(blocks), entry.number)
            entry.first_event_ns = entry.first_event_ns or time.time_ns()
            self._send_json(200, message)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        if self.server.first_chunk_delay_s > 0:
            time.sleep(self.server.first_chunk_delay_s)  # the model's time to its first token
        for name, data, text in _events(body, blocks, entry.number):
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
            sent = time.time_ns()
            if entry.first_event_ns is None:
                entry.first_event_ns = sent
            if text and entry.first_text_ns is None:
                entry.first_text_ns = sent

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean


class FakeAnthropicServer(ThreadingHTTPServer):
    """The HTTP server; :attr:`log` holds every request received, in arrival order."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log: list[Received] = []
        self.first_chunk_delay_s = 0.0
        self.tool_rounds = 1
        self.tool_calls = 2
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give ``anthropic.Anthropic``."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, body: dict[str, Any], received_ns: int) -> Received:
        with self._lock:
            entry = Received(body, received_ns, len(self.log) + 1)
            self.log.append(entry)
        return entry


@contextmanager
def serve() -> Iterator[FakeAnthropicServer]:
    """Run the server on a free loopback port in a background thread for the block."""
    server = FakeAnthropicServer()
    thread = threading.Thread(target=server.serve_forever, name="fake-anthropic", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
