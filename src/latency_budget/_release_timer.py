"""A thread that releases held local roots once they are due, so a quiet process forwards them too.

The processor holds a local root back for its late spans (``late_span_wait_ms``,
``late_span_grace_ms``) and releases it at the next root's start or end, a late child's
end, ``force_flush`` or ``shutdown``. In a process that then falls quiet none of those
comes: this timer releases the root instead. In a busy process the hot path releases the
roots first, and a timer that woke at each root's deadline would wake once a root for
nothing (a thread switch each): so its runs are coalesced, at most one every ``period_ns``
(the hold), and a root in a quiet process is released within twice its hold. The thread
starts lazily at the first hold and exits once no root has been held for ``LINGER_NS`` (a
later hold starts a new one: a process whose requests come further apart than the hold
would otherwise start a thread per request); it is a daemon, holds the processor only
through a weak reference, and is started again after a fork (the child has no thread;
``reset_after_fork``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

from latency_budget import _guard

__all__ = ["LINGER_NS", "ReleaseTimer"]

LINGER_NS = 5_000_000_000
"""How long the thread waits for a next hold, once none is left, before it exits."""

Wait = Callable[[threading.Condition, float], object]
"""How the thread waits on its condition, up to that many seconds: ``Condition.wait`` (a test steps its clock)."""


class ReleaseTimer:
    """Calls ``release`` once the earliest deadline given to :meth:`wake_by` has passed (monotonic ns),
    and never sooner than ``period_ns`` after its previous call.

    ``release`` (a bound method, held weakly) judges and forwards the held roots that are
    due and returns the earliest deadline still held, or None. :meth:`wake_by` never raises
    and never waits for ``release``; while the timer is set for a deadline at or before the
    one given, it returns without taking a lock.
    """

    def __init__(
        self,
        release: Callable[[], int | None],
        *,
        period_ns: int,
        linger_ns: int = LINGER_NS,
        clock: Callable[[], int] = time.monotonic_ns,
        wait: Wait = threading.Condition.wait,
    ) -> None:
        self._release = weakref.WeakMethod(release)
        self._period = period_ns
        self._linger = linger_ns
        self._clock = clock
        self._wait = wait
        self._cond = threading.Condition(threading.Lock())
        self._deadline: int | None = None
        self._last_run: int | None = None  # the clock when release last ran
        self._thread: threading.Thread | None = None
        self._stopped = False

    def wake_by(self, deadline: int) -> None:
        """Make sure ``release`` runs once ``deadline`` has passed (unless a run for an earlier one is pending)."""
        # Unlocked: a pending run at or before ``deadline`` covers it. Should the thread take
        # that run meanwhile, its ``release`` reads the held roots after the caller added its
        # own, and sets the timer again for the earliest one left.
        pending = self._deadline
        if pending is not None and pending <= deadline:
            return
        try:
            with self._cond:
                if self._stopped or (self._deadline is not None and self._deadline <= deadline):
                    return
                self._deadline = deadline
                if self._thread is None:
                    thread = threading.Thread(target=self._run, name="latency-budget-held-roots", daemon=True)
                    thread.start()
                    self._thread = thread
                else:
                    self._cond.notify()
        except Exception as exc:  # no thread (interpreter shutting down): the next root, flush or shutdown releases
            _guard.log_internal_error("held roots timer", exc)

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop the thread without running ``release`` again, and wait (``timeout_s`` at most) for a run in progress.

        Later calls to :meth:`wake_by` do nothing. So a root the thread is forwarding reaches
        the downstream processor before the caller shuts it down.
        """
        with self._cond:
            self._stopped = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def reset_after_fork(self) -> None:
        """In a forked child: no thread runs and no root is held; the lock may have been held at the fork."""
        self._cond = threading.Condition(threading.Lock())
        self._deadline = None
        self._last_run = None
        self._thread = None

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                idle_since: int | None = None
                while True:
                    if self._stopped or cond is not self._cond:
                        if cond is self._cond:
                            self._thread = None
                        return
                    now = self._clock()
                    deadline = self._deadline
                    if deadline is None:  # none held: wait a while for the next hold, then exit
                        if idle_since is None:
                            idle_since = now
                        remaining = idle_since + self._linger - now
                        if remaining <= 0:
                            self._thread = None  # the next hold starts a thread
                            return
                    else:
                        idle_since = None
                        if self._last_run is not None:  # coalesced: one run a period at most
                            deadline = max(deadline, self._last_run + self._period)
                        remaining = deadline - now
                        if remaining <= 0:
                            break
                    self._wait(cond, remaining / 1e9)
                self._deadline = None
                self._last_run = now
            release = self._release()
            if release is None:  # the processor is gone
                return
            try:
                following = release()
            except Exception as exc:
                _guard.log_internal_error("held roots timer", exc)
                following = None
            del release
            if following is not None:
                self.wake_by(following)
