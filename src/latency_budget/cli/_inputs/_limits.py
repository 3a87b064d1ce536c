"""Bounds on recorded trace input, and parsing JSON within them.

A trace file, standard input or a Jaeger answer may be anything: a gzip bomb, one
endless line, JSON nested a million deep, integers of a million digits. Each input is
read only up to its size limit and each document is checked against the others, so a
hostile input ends in one :class:`TraceInputError` instead of a hang, a ``MemoryError``
or a traceback. The defaults are far above any real export; the command line can raise
or lower each of them (``--max-input-size`` and friends).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ._errors import TraceInputError, show

__all__ = ["MAX_JSON_DEPTH", "STREAMED_MAX_SPANS", "InputLimits", "load_json", "parse_size"]

MAX_JSON_DEPTH = 500
STREAMED_MAX_SPANS = 10_000_000
"""``--max-spans`` of ``check``, ``report`` and ``suggest``, which judge trace files trace by trace and keep
only each request's report: ten million spans of the standard AI trace took 8 to 13 minutes of CPU (two runs) and 3 GB
(benchmarks/README.md, "Scaling"); ``doctor`` holds every span and keeps :attr:`InputLimits.max_spans`."""
_SIZE = re.compile(r"(\d+)\s*([kmg]i?b?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass(frozen=True, slots=True)
class InputLimits:
    """How much recorded input the CLI accepts (see docs/reliability.md)."""

    max_bytes: int = 1 << 30
    """Largest input, after decompression: a file, standard input or a Jaeger answer."""
    max_line_bytes: int = 256 << 20
    """Longest line of JSON lines (a Jaeger answer saved on one line is one line)."""
    max_depth: int = 100
    """Deepest nesting of JSON objects and arrays in a document (OTLP/JSON nests about 12 deep); at most
    ``MAX_JSON_DEPTH``, below the depth at which Python's JSON parser gives up."""
    max_spans: int = 1_000_000
    """Most spans over all inputs of a command that holds them all (``doctor``, about 563 bytes a span); the
    commands that judge trace by trace default to :data:`STREAMED_MAX_SPANS` (docs/cli.md, "What a recording
    costs")."""


def parse_size(text: str) -> int:
    """Bytes in ``512M``, ``1G``, ``64KiB`` or ``1048576``; ``ValueError`` otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or len(match.group(1)) > 15:
        raise ValueError(f"expected a size such as 512M or 2G, got {text!r}")
    unit = (match.group(2) or "").lower()[:1]
    value = int(match.group(1)) * _UNITS[unit if unit != "b" else ""]
    if value < 1:
        raise ValueError(f"expected a size of at least 1 byte, got {text!r}")
    return value


def load_json(text: str, where: str, limits: InputLimits, *, line_mode: bool) -> object:
    """Parse one JSON document; every way it can fail is one TraceInputError naming ``where``.

    ``where`` is ``file`` (errors add the line) or, for JSON lines, ``file:line``.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        place = where if line_mode else f"{where}:{exc.lineno}"
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            what = "line" if line_mode else "file"
            raise TraceInputError(f"{place}: truncated JSON (the {what} ends in the middle of a value)") from None
        raise TraceInputError(f"{place}: invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:  # deeper than the parser itself goes (about 1,000 levels): over any --max-json-depth
        raise TraceInputError(f"{where}: JSON nested more than {limits.max_depth} levels deep") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit limit for int()
        problem = "a number with more than 4,300 digits" if "digits" in str(exc) else show(str(exc), 200)
        raise TraceInputError(f"{where}: unusable JSON: {problem}") from None
    if _too_deep(document, limits.max_depth):
        raise TraceInputError(
            f"{where}: JSON nested more than {limits.max_depth} levels deep (see --max-json-depth)"
        ) from None
    return document


def _too_deep(document: object, limit: int) -> bool:
    # Level by level, containers only: a fraction of what json.loads itself costs.
    level: list[Any] = [document] if document.__class__ is dict or document.__class__ is list else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for value in level:
            for item in value.values() if value.__class__ is dict else value:
                kind = item.__class__
                if kind is dict or kind is list:
                    below.append(item)
        level = below
        depth += 1
    return False
