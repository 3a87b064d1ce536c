"""What really happened in a request, held against what the processor wrote on its root.

The fidelity stacks (qdrant, mcp, anthropic) count from the truth, never from the spans:
the requests the local model server received and the instant it sent each answer's first
text chunk (its own log), the tool runs the tool functions recorded, the vector searches
the retrieval step ran. :class:`Runs` is that record for tools and searches; the model
server keeps its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from .stacks import Outcome

# A first token that an instrumentation records in whole milliseconds from its span's start
# can read up to this much before the chunk was really sent.
WHOLE_MS_NS = 1_000_000


@dataclass(frozen=True)
class Run:
    """One run of a tool or a search: what ran, with what, and when (``time.time_ns()``)."""

    name: str
    argument: str
    started_ns: int
    ended_ns: int


@dataclass
class Runs:
    """The runs that really happened, recorded by the functions that did the work (thread-safe)."""

    runs: list[Run] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def run(self, name: str, argument: str) -> Iterator[None]:
        """Record one run of ``name`` around the block."""
        started = time.time_ns()
        yield
        ended = time.time_ns()
        with self._lock:
            self.runs.append(Run(name, argument, started, ended))

    def add(self, run: Run) -> None:
        with self._lock:
            self.runs.append(run)

    def clear(self) -> None:
        with self._lock:
            self.runs.clear()

    def named(self, name: str) -> list[Run]:
        return [r for r in self.runs if r.name == name]


def overlapped(runs: Sequence[Run]) -> bool:
    """Whether every run was in flight while every other one was (they ran in parallel)."""
    return bool(runs) and max(r.started_ns for r in runs) < min(r.ended_ns for r in runs)


def first_token_instant_ns(outcome: Outcome) -> int | None:
    """The instant the processor says the request's first token came (root start + its first token)."""
    _, request_ms = outcome.first_token_ms()
    if request_ms is None:
        return None
    return (outcome.root.start_time or 0) + round(request_ms * 1e6)


def assert_first_token_is_the_first_text(outcome: Outcome, first_text_sent_ns: int) -> None:
    """The request's first token is the first text chunk the model server sent, not an earlier chunk.

    It cannot come before the server sent it (less the whole millisecond an instrumentation may
    round away), nor after the request's last model call ended.
    """
    seen = first_token_instant_ns(outcome)
    assert seen is not None, "no first token on the request"
    model_ends = [s.end_time or 0 for s in outcome.in_stage("model_call")]
    latest = max(model_ends, default=outcome.root.end_time or 0)
    sent_ms = (first_text_sent_ns - (outcome.root.start_time or 0)) / 1e6
    assert first_text_sent_ns - WHOLE_MS_NS <= seen <= latest, (
        f"first token at {(seen - (outcome.root.start_time or 0)) / 1e6:.3f} ms from the request's start; "
        f"the first text chunk was sent at {sent_ms:.3f} ms"
    )
