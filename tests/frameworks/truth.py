"""The fidelity lab's yardstick: what really happened in one request, never read from spans.

Model calls are the chat requests the local model server received (its own log: ``served``
of the fake OpenAI server, ``log`` of the fake Anthropic one, with the instant it sent each
answer's first text chunk); tool calls and vector searches are the runs the functions that
did the work recorded themselves (:class:`Runs`; a stop tool such as ``final_answer`` is no
tool call, it is the framework's bookkeeping); the request's first token is the first chunk
with text the server sent. What the processor wrote on the request root is held against these.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..instrumentation.fake_openai import FakeOpenAIServer, Served
from .stacks import Outcome

# A first token that an instrumentation records in whole milliseconds from its span's start
# can read up to this much before the chunk was really sent.
WHOLE_MS_NS = 1_000_000
# The processor writes milliseconds rounded to the microsecond.
ROUNDING_NS = 1_000


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

    def ran(self, name: str, argument: str = "") -> None:
        """Record one run of ``name`` at this instant; called by the tool function itself."""
        now = time.time_ns()
        self.add(Run(name, argument, now, now))

    @property
    def names(self) -> list[str]:
        """The names of the runs, in the order they were recorded."""
        with self._lock:
            return [r.name for r in self.runs]

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


@dataclass(frozen=True)
class Truth:
    """One request as it really happened: the server's requests, in arrival order, and the tool runs."""

    served: tuple[Served, ...]
    tools_ran: tuple[str, ...]

    @classmethod
    def of(cls, server: FakeOpenAIServer, runs: Runs) -> Truth:
        """What the server and the tools recorded since they were last cleared."""
        return cls(tuple(server.served), tuple(runs.names))

    @property
    def counts(self) -> dict[str, int]:
        """stage -> the real number of calls (stages with none left out), as :meth:`Outcome.counts` says it."""
        real = {"model_call": len(self.served), "tool_calls": len(self.tools_ran)}
        return {stage: count for stage, count in real.items() if count}

    def first_text_window_ns(self, root_end_ns: int) -> tuple[int, int] | None:
        """When the client can have received the first text chunk: from its sending to the client's next act.

        The next act is the next request the server received, or the end of the request's root;
        None when the server sent no text at all.
        """
        for index, served in enumerate(self.served):
            if served.first_text_ns is not None:
                later = [s.received_ns for s in self.served[index + 1 :]]
                return served.first_text_ns, min(later, default=root_end_ns)
        return None


def assert_counts_are_the_truth(outcome: Outcome, truth: Truth) -> None:
    """The request root's calls per stage are the calls that really happened."""
    assert outcome.counts() == truth.counts, (
        f"written on the root {outcome.counts()}, really happened {truth.counts} "
        f"(tools ran: {Counter(truth.tools_ran)})"
    )


def assert_first_token_is_the_truth(outcome: Outcome, truth: Truth, *, recorded: bool = True) -> None:
    """The request's first token lies between the instant the first text chunk was sent and the client's next act.

    No text sent, no first token written. ``recorded`` False: the stack's spans carry no time of
    their first chunk, so the root may have no first token, but one it has must still be the truth.
    """
    root = outcome.root
    window = truth.first_text_window_ns(root.end_time or 0)
    written = outcome.first_token_ms()[1]
    if window is None:
        assert written is None, f"no text chunk was sent, yet the root says the first token came at {written} ms"
        return
    if written is None:
        assert not recorded, "the server sent text, the spans timed their first chunk, and the root has no first token"
        return
    instant = (root.start_time or 0) + round(written * 1e6)
    earliest, latest = window
    assert earliest - ROUNDING_NS <= instant <= latest + ROUNDING_NS, (
        f"first token written at {written} ms after the root's start; the first text chunk was sent at "
        f"{(earliest - (root.start_time or 0)) / 1e6:.3f} ms and the client's next act came at "
        f"{(latest - (root.start_time or 0)) / 1e6:.3f} ms"
    )


def assert_judged_as_the_truth(outcome: Outcome, truth: Truth, *, recorded: bool = True) -> None:
    """Counts and first token as they really were, no false violation, every span exported once."""
    assert_counts_are_the_truth(outcome, truth)
    assert_first_token_is_the_truth(outcome, truth, recorded=recorded)
    assert outcome.violation_kinds() == []
    outcome.assert_exported_once()
