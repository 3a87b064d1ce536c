"""The fidelity lab's yardstick: what really happened in one request, never read from spans.

Model calls are the chat requests the fake OpenAI server received (its ``served`` log);
tool calls are the runs the tool functions recorded themselves (a stop tool such as
``final_answer`` is no tool call, it is the framework's bookkeeping); the request's first
token is the first chunk with text the server sent. What the processor wrote on the request
root is held against these.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from ..instrumentation.fake_openai import FakeOpenAIServer, Served
from .stacks import Outcome

# The processor writes milliseconds rounded to the microsecond.
ROUNDING_NS = 1_000


@dataclass
class ToolRuns:
    """The runs of the tool functions, as each function records its own run (thread-safe)."""

    names: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ran(self, name: str) -> None:
        """Record one run of the tool ``name``; called by the tool function itself."""
        with self._lock:
            self.names.append(name)

    def clear(self) -> None:
        with self._lock:
            self.names.clear()


@dataclass(frozen=True)
class Truth:
    """One request as it really happened: the server's requests, in arrival order, and the tool runs."""

    served: tuple[Served, ...]
    tools_ran: tuple[str, ...]

    @classmethod
    def of(cls, server: FakeOpenAIServer, runs: ToolRuns) -> Truth:
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
