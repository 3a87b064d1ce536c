"""Fetch traces live from a Jaeger query service (``GET /api/traces?service=...``)."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._errors import TraceInputError

__all__ = ["fetch_jaeger", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


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
    return total


def fetch_jaeger(base_url: str, service: str, lookback_s: float, *, limit: int, timeout_s: float) -> dict[str, Any]:
    """The JSON of one trace search, as Jaeger's UI makes it; errors name the URL.

    The search window ends now and starts ``lookback_s`` earlier (sent as ``start`` and
    ``end`` in microseconds, which every Jaeger version honours).
    """
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TraceInputError(
            f"--jaeger: expected the query service's URL, like http://localhost:16686, got {base_url!r}"
        )
    end_us = time.time_ns() // 1_000
    query = urllib.parse.urlencode(
        {
            "service": service,
            "start": end_us - round(lookback_s * 1e6),
            "end": end_us,
            "limit": limit,
        }
    )
    url = f"{base_url.rstrip('/')}/api/traces?{query}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
        raise TraceInputError(f"{url}: Jaeger answered HTTP {exc.code}{': ' + detail if detail else ''}") from None
    except urllib.error.URLError as exc:
        raise TraceInputError(f"{base_url}: cannot reach Jaeger: {exc.reason}") from None
    except http.client.HTTPException as exc:  # a body cut short, a garbled status line
        raise TraceInputError(f"{url}: cannot read Jaeger's answer: {exc!r}") from None
    except (TimeoutError, OSError) as exc:
        raise TraceInputError(f"{base_url}: cannot reach Jaeger: {exc}") from None
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TraceInputError(f"{url}: the answer is not JSON; is this Jaeger's query service (port 16686)?") from None
    if not isinstance(document, dict) or "data" not in document:
        raise TraceInputError(f"{url}: the answer is not a Jaeger trace search result")
    return document
