"""Fetch traces live from a Jaeger query service (``GET /api/traces?service=...``)."""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._errors import TraceInputError, show
from ._limits import InputLimits, load_json

__all__ = ["fetch_jaeger", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_LOOKBACK_S = 100 * 365 * 86400.0  # a century: anything longer is a typo
_CHUNK = 1 << 20


def parse_duration(text: str) -> float:
    """Seconds in a duration like ``90s``, ``15m``, ``1h``, ``2d`` or ``1h30m``; ``ValueError`` otherwise."""
    compact = text.strip().replace(" ", "")
    position, total = 0, 0.0
    for match in _DURATION.finditer(compact):
        if match.start() != position:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        position = match.end()
    if position != len(compact) or not compact or total <= 0:
        raise ValueError(f"expected a duration such as 30m, 1h or 2d, got {text!r}")
    if not total <= _MAX_LOOKBACK_S:  # also inf, from a number with hundreds of digits
        raise ValueError(f"expected a duration of at most 100 years, got {text!r}")
    return total


def fetch_jaeger(
    base_url: str,
    service: str,
    lookback_s: float,
    *,
    limit: int,
    timeout_s: float,
    limits: InputLimits,
    end_ago_s: float = 0.0,
) -> tuple[dict[str, Any], str]:
    """The JSON of one trace search, as Jaeger's UI makes it, and the URL asked; errors name the URL.

    The search window ends ``end_ago_s`` before now (default: now) and starts ``lookback_s``
    before now (sent as ``start`` and ``end`` in microseconds, which every Jaeger version
    honours). ``timeout_s`` bounds the whole call: name lookup, connection, a slow or
    trickling answer. The answer may be at most ``limits.max_bytes`` long, whatever its
    ``Content-Length`` says.
    """
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TraceInputError(
            f"--jaeger: expected the query service's URL, like http://localhost:16686, got {base_url!r}"
        )
    now_us = time.time_ns() // 1_000
    end_us = now_us - round(end_ago_s * 1e6)
    query = urllib.parse.urlencode(
        {
            "service": service,
            "start": now_us - round(lookback_s * 1e6),
            "end": end_us,
            "limit": limit,
        }
    )
    url = f"{base_url.rstrip('/')}/api/traces?{query}"
    body = _get_within(url, base_url, timeout_s, limits.max_bytes)
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceInputError(f"{url}: the answer is not JSON; is this Jaeger's query service (port 16686)?") from None
    if not text.lstrip().startswith(("{", "[")):
        raise TraceInputError(f"{url}: the answer is not JSON; is this Jaeger's query service (port 16686)?")
    document = load_json(text, url, limits, line_mode=True)
    if not isinstance(document, dict) or "data" not in document:
        raise TraceInputError(f"{url}: the answer is not a Jaeger trace search result")
    return document, url


def _get_within(url: str, base_url: str, timeout_s: float, max_bytes: int) -> bytes:
    """GET ``url`` on a worker thread, waiting for it at most ``timeout_s`` in all.

    Socket timeouts bound each read, not the whole answer, and not the name lookup: a
    server that trickles a byte a second never trips them. The worker stops reading at
    the deadline; if it is stuck before that (a lookup, trickled headers), it is left to
    finish on its own, a daemon thread, and the command fails at the deadline all the same.
    """
    deadline = time.monotonic() + timeout_s
    outcome: list[bytes | TraceInputError] = []

    def work() -> None:
        try:
            outcome.append(_download(url, base_url, deadline, timeout_s, max_bytes))
        except TraceInputError as exc:
            outcome.append(exc)
        except Exception as exc:  # anything urllib or http.client can raise ends in one line
            outcome.append(TraceInputError(f"{base_url}: cannot read Jaeger's answer: {show(exc, 200)}"))

    worker = threading.Thread(target=work, name="latency-budget-jaeger", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise TraceInputError(f"{base_url}: no complete answer from Jaeger within {timeout_s:g} s (see --timeout)")
    result = outcome[0]
    if isinstance(result, TraceInputError):
        raise result
    return result


def _download(url: str, base_url: str, deadline: float, timeout_s: float, max_bytes: int) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json", "Accept-Encoding": "identity"})
    late = TraceInputError(f"{base_url}: no complete answer from Jaeger within {timeout_s:g} s (see --timeout)")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            header = response.headers.get("Content-Length", "").strip()
            declared = int(header) if header.isascii() and header.isdigit() and len(header) < 20 else None
            if declared is not None and declared > max_bytes:
                raise TraceInputError(
                    f"{url}: Jaeger announces an answer of {declared:,} bytes, "
                    f"more than {max_bytes:,} (see --max-input-size)"
                )
            chunks: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    raise late
                chunk = response.read1(min(_CHUNK, max_bytes + 1 - size))
                if not chunk:
                    if declared is not None and size < declared:
                        raise http.client.IncompleteRead(b"".join(chunks), declared - size)
                    return b"".join(chunks)
                size += len(chunk)
                if size > max_bytes:
                    raise TraceInputError(
                        f"{url}: the answer is longer than {max_bytes:,} bytes (see --max-input-size)"
                    )
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        try:
            detail = exc.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
        except Exception:  # a broken error body: the status says enough
            detail = ""
        raise TraceInputError(f"{url}: Jaeger answered HTTP {exc.code}{': ' + detail if detail else ''}") from None
    except urllib.error.URLError as exc:
        raise TraceInputError(f"{base_url}: cannot reach Jaeger: {exc.reason}") from None
    except http.client.IncompleteRead as exc:
        raise TraceInputError(
            f"{url}: Jaeger closed the connection in the middle of its answer "
            f"(after {len(exc.partial):,} bytes, {exc.expected or 'more'} still expected)"
        ) from None
    except http.client.HTTPException as exc:
        raise TraceInputError(f"{base_url}: not a valid HTTP answer from Jaeger: {show(exc, 200)}") from None
    except (TimeoutError, OSError) as exc:
        raise TraceInputError(f"{base_url}: cannot reach Jaeger: {exc}") from None
