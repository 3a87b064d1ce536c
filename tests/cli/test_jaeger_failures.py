"""`check --jaeger` against answers a real Jaeger cannot be made to give: trickled headers and bodies,
a body cut off mid-way, a Content-Length of terabytes, an endless body. A loopback server plays them.

Each ends in one line naming the URL, exit 2, within the one deadline that ``--timeout`` sets for
the whole call (the server's pacing is the hostile behaviour itself, not a synchronisation).
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import pytest

from .conftest import BUDGETS, JAEGER_SEARCH, run_cli

Behaviour = Callable[[socket.socket, threading.Event], None]


class _Handler(socketserver.BaseRequestHandler):
    behaviour: Behaviour
    stop: threading.Event

    def handle(self) -> None:
        self.request.recv(65536)  # the request; its content does not matter here
        with contextlib.suppress(OSError):  # the client gave up: that is the point
            type(self).behaviour(self.request, type(self).stop)


@pytest.fixture
def hostile_server() -> Iterator[Callable[[Behaviour], str]]:
    """Start a loopback server that answers every request with ``behaviour``; returns its URL."""
    servers: list[socketserver.ThreadingTCPServer] = []
    stop = threading.Event()

    def start(behaviour: Behaviour) -> str:
        handler = type("Handler", (_Handler,), {"behaviour": staticmethod(behaviour), "stop": stop})
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def _trickle(sock: socket.socket, stop: threading.Event, data: bytes) -> None:
    """Send ``data`` a byte every 50 ms: each read returns long before any socket timeout."""
    for byte in data:
        if stop.wait(0.05):
            return
        sock.sendall(bytes([byte]))


def trickled_headers(sock: socket.socket, stop: threading.Event) -> None:
    """An endless header section, one byte at a time."""
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    _trickle(sock, stop, b"X-Slow: " + b"a" * 100_000)


def trickled_body(sock: socket.socket, stop: threading.Event) -> None:
    """Prompt headers, then a body one byte at a time."""
    body = JAEGER_SEARCH.read_bytes()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    _trickle(sock, stop, body)


def cut_off_body(sock: socket.socket, stop: threading.Event) -> None:
    """Announce the whole body, send a tenth of it and close."""
    body = JAEGER_SEARCH.read_bytes()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    sock.sendall(body[: len(body) // 10])


def terabyte_announced(sock: socket.socket, stop: threading.Event) -> None:
    """Announce a body of 2 TiB, then wait."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{" % (2 << 40))
    stop.wait(60)


def endless_body(sock: socket.socket, stop: threading.Event) -> None:
    """No Content-Length: send JSON-looking bytes until the client hangs up."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[")
    chunk = b"[1]," * 16384
    while not stop.is_set():
        sock.sendall(chunk)


def check_jaeger(url: str, *options: str) -> tuple[int, str, str]:
    """``check --jaeger URL`` in a subprocess (its own deadline is what is tested; 120 s only detects a hang)."""
    result = run_cli("check", "--jaeger", url, "--service", "support-assistant", "-b", BUDGETS, *options, timeout=120)
    return result.returncode, result.stdout, result.stderr


def assert_one_line(code: int, out: str, err: str, *fragments: str) -> None:
    """Exit 2, no partial output, one stderr line with every fragment."""
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("behaviour", [trickled_headers, trickled_body], ids=["headers", "body"])
def test_a_trickling_server_cannot_outlast_the_deadline(
    hostile_server: Callable[[Behaviour], str], behaviour: Behaviour
) -> None:
    """A byte every 50 ms keeps every socket read alive, but --timeout 2 bounds the whole call: one line, exit 2."""
    url = hostile_server(behaviour)
    assert_one_line(*check_jaeger(url, "--timeout", "2"), url, "no complete answer from Jaeger within 2 s")


def test_a_body_cut_off_mid_way_is_one_line(hostile_server: Callable[[Behaviour], str]) -> None:
    """A connection closed before the announced Content-Length (IncompleteRead) names the URL and what arrived."""
    url = hostile_server(cut_off_body)
    assert_one_line(*check_jaeger(url), f"{url}/api/traces?service=", "closed the connection in the middle")


def test_an_announced_terabyte_is_refused_before_reading(hostile_server: Callable[[Behaviour], str]) -> None:
    """A Content-Length over --max-input-size is refused at once, without allocating it."""
    url = hostile_server(terabyte_announced)
    assert_one_line(*check_jaeger(url), "Jaeger announces an answer of 2,199,023,255,552 bytes", "--max-input-size")


def test_an_endless_body_stops_at_the_size_limit(hostile_server: Callable[[Behaviour], str]) -> None:
    """A body with no Content-Length is read only up to --max-input-size, whatever the server sends."""
    url = hostile_server(endless_body)
    assert_one_line(*check_jaeger(url, "--max-input-size", "2M"), "the answer is longer than 2,097,152 bytes")
