"""The held-roots timer: its runs are coalesced, one a hold at most, however many roots a burst holds.

The processor holds every local root for ``late_span_grace_ms`` and its hot path releases
the roots that are due; the timer is for a process that falls quiet. Time here is
simulated: the timer's clock moves only when the timer waits, and only once the test lets
it (no sleeps, no wall clock).
"""

from __future__ import annotations

import math
import threading
from collections import deque

from latency_budget._release_timer import ReleaseTimer

HOLD_NS = 50_000_000  # the default grace, 50 ms


class SimulatedTime:
    """A clock the test sets, and a wait that steps it to the wait's end once ``flowing`` is set."""

    def __init__(self) -> None:
        self.now = 0
        self.waits = 0
        self.flowing = threading.Event()

    def clock(self) -> int:
        return self.now

    def wait(self, cond: threading.Condition, timeout_s: float) -> bool:
        self.waits += 1
        start = self.now
        cond.release()  # as Condition.wait does: others may call wake_by meanwhile
        try:
            assert self.flowing.wait(30), "the test never let time flow"
        finally:
            cond.acquire()
        self.now = max(self.now, start + math.ceil(timeout_s * 1e9))
        return False


class HeldRoots:
    """The processor as the timer sees it: roots held until their deadline, released by ``release_due``."""

    def __init__(self, time: SimulatedTime) -> None:
        self.time = time
        self.lock = threading.Lock()
        self.deadlines: deque[int] = deque()
        self.released: list[tuple[int, int]] = []  # (deadline, when released)
        self.runs = 0
        self.empty = threading.Event()

    def hold(self, timer: ReleaseTimer) -> int:
        """Hold a root now, until a hold from now, and tell the timer (what the processor's _hold does)."""
        deadline = self.time.now + HOLD_NS
        with self.lock:
            self.deadlines.append(deadline)
            self.empty.clear()
        timer.wake_by(deadline)
        return deadline

    def release_due(self) -> int | None:
        with self.lock:
            self.runs += 1
            while self.deadlines and self.deadlines[0] <= self.time.now:
                self.released.append((self.deadlines.popleft(), self.time.now))
            if not self.deadlines:
                self.empty.set()
                return None
            return self.deadlines[0]


def _timer(roots: HeldRoots, time: SimulatedTime) -> ReleaseTimer:
    return ReleaseTimer(roots.release_due, period_ns=HOLD_NS, clock=time.clock, wait=time.wait)


def test_a_burst_of_held_roots_wakes_the_timer_once_a_hold_not_once_a_root() -> None:
    """100 roots held 0.1 ms apart, then quiet: the timer waits and runs twice (not 100 times), releasing each once."""
    time = SimulatedTime()
    roots = HeldRoots(time)
    timer = _timer(roots, time)
    deadlines = []
    for _ in range(100):
        deadlines.append(roots.hold(timer))
        time.now += 100_000
    time.flowing.set()
    assert roots.empty.wait(30)
    timer.stop()
    assert (roots.runs, time.waits) == (2, 2)
    assert [deadline for deadline, _ in roots.released] == deadlines  # each once, in order
    assert all(deadline <= when <= deadline + HOLD_NS for deadline, when in roots.released)  # never early


def test_a_root_held_after_a_quiet_spell_is_released_at_its_own_deadline() -> None:
    """Coalescing never delays the first root after a quiet spell: it is released exactly at its deadline."""
    time = SimulatedTime()
    time.flowing.set()
    roots = HeldRoots(time)
    timer = _timer(roots, time)
    roots.hold(timer)
    assert roots.empty.wait(30)
    time.now += 10 * HOLD_NS  # quiet for ten holds
    deadline = roots.hold(timer)
    assert roots.empty.wait(30)
    timer.stop()
    assert roots.released[-1] == (deadline, deadline)
