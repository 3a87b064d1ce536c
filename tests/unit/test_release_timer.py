"""The held-roots timer: its runs are coalesced, one a hold at most, however many roots a burst holds.

The processor holds every local root for ``late_span_grace_ms`` and its hot path releases
the roots that are due; the timer is for a process that falls quiet. Time here is
simulated and stepped by the test: the timer's clock moves only when the test ends one of
its waits (no sleeps, no wall clock).
"""

from __future__ import annotations

import math
import threading
from collections import deque

from latency_budget._release_timer import LINGER_NS, ReleaseTimer

HOLD_NS = 50_000_000  # the default grace, 50 ms
PATIENCE_S = 30.0  # how long the test waits for the timer's thread to reach its next step


class SimulatedTime:
    """The timer's clock and wait: a wait lasts until the test steps it (the clock moves to its end) or wakes it."""

    def __init__(self) -> None:
        self.now = 0
        self.read = 0  # the clock as the timer last read it: its waits are timed from there
        self.waits = 0
        self._turn = threading.Condition()
        self._until: int | None = None  # the end of the wait in progress

    def clock(self) -> int:
        self.read = self.now
        return self.read

    def wait(self, cond: threading.Condition, timeout_s: float) -> bool:
        with self._turn:
            self.waits += 1
            self._until = self.read + math.ceil(timeout_s * 1e9)
            self._turn.notify_all()
        cond.release()  # as Condition.wait does: wake_by may run meanwhile
        try:
            with self._turn:
                assert self._turn.wait_for(lambda: self._until is None, PATIENCE_S), "the test never ended the wait"
        finally:
            cond.acquire()
        return False

    def waiting_until(self) -> int:
        """Once the timer waits: the time its wait ends at."""
        with self._turn:
            assert self._turn.wait_for(lambda: self._until is not None, PATIENCE_S), "the timer never waited"
            assert self._until is not None
            return self._until

    def step(self) -> None:
        """End the timer's wait at its end: the clock moves there."""
        until = self.waiting_until()
        with self._turn:
            self.now = max(self.now, until)
            self._until = None
            self._turn.notify_all()

    def wake(self) -> None:
        """End the timer's wait now (what ``Condition.notify`` does), the clock where it is."""
        self.waiting_until()
        with self._turn:
            self._until = None
            self._turn.notify_all()


class HeldRoots:
    """The processor as the timer sees it: roots held until their deadline, released by ``release_due``."""

    def __init__(self, time: SimulatedTime) -> None:
        self.time = time
        self.lock = threading.Lock()
        self.deadlines: deque[int] = deque()
        self.released: list[tuple[int, int]] = []  # (deadline, when released)
        self.threads: list[threading.Thread] = []  # the thread of each run

    def hold(self, timer: ReleaseTimer) -> int:
        """Hold a root now, until a hold from now, and tell the timer (what the processor's _hold does)."""
        deadline = self.time.now + HOLD_NS
        with self.lock:
            self.deadlines.append(deadline)
        timer.wake_by(deadline)
        return deadline

    def release_due(self) -> int | None:
        with self.lock:
            self.threads.append(threading.current_thread())
            while self.deadlines and self.deadlines[0] <= self.time.now:
                self.released.append((self.deadlines.popleft(), self.time.now))
            return self.deadlines[0] if self.deadlines else None


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
    assert time.waiting_until() == deadlines[0]
    time.step()  # the first root is due: released
    assert time.waiting_until() == deadlines[0] + HOLD_NS  # not deadlines[1]: one run a hold at most
    time.step()  # the other 99 are due: released
    assert time.waiting_until() == deadlines[0] + HOLD_NS + LINGER_NS  # none held: lingering
    time.step()  # the thread exits
    timer.stop()
    assert (len(roots.threads), time.waits) == (2, 3)
    assert [deadline for deadline, _ in roots.released] == deadlines  # each once, in order
    assert all(deadline <= when <= deadline + HOLD_NS for deadline, when in roots.released)  # never early


def test_a_root_held_after_a_quiet_spell_is_released_at_its_own_deadline_by_the_same_thread() -> None:
    """A hold while the thread lingers: no thread is started for it, and coalescing does not delay it."""
    time = SimulatedTime()
    roots = HeldRoots(time)
    timer = _timer(roots, time)
    first = roots.hold(timer)
    time.step()
    assert time.waiting_until() == first + LINGER_NS  # released; none held: the thread lingers
    time.now += 3 * HOLD_NS  # quiet for three holds
    second = roots.hold(timer)
    time.wake()  # wake_by's notify
    assert time.waiting_until() == second
    time.step()
    assert time.waiting_until() == second + LINGER_NS
    time.step()  # the thread exits
    timer.stop()
    assert roots.released == [(first, first), (second, second)]
    assert len(roots.threads) == 2
    assert roots.threads[0] is roots.threads[1]
