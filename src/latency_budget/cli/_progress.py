"""A one-line progress bar on standard error, for runs long enough to need one."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Draws ``label [#####.....] done/total`` in place, and erases it when closed.

    ``counter(done, total)`` writes the ``done/total`` part (``12/45 MB``); an update that
    gives ``items`` adds their count and rate, ``, 123,456 spans, 45,678 spans/s``.

    It draws nothing unless ``stream`` is a terminal (not a pipe, a file or a CI log,
    and not ``TERM=dumb``), and nothing until the run has lasted ``delay_s``: a run that
    finishes in a blink needs no bar. Redraws at most every ``interval_s``. Thread-safe.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO | None = None,
        delay_s: float = 0.4,
        interval_s: float = 0.1,
        width: int = 30,
        clock: Callable[[], float] = time.monotonic,
        counter: Callable[[int, int], str] | None = None,
        item_name: str = "spans",
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = max(1, total)
        self.label = label
        self.width = width
        self._clock = clock
        self._counter = counter or _fraction
        self._item_name = item_name
        self._started = clock()
        self._delay = delay_s
        self._interval = interval_s
        self._last_draw: float | None = None
        self._drawn = False
        self._lock = threading.Lock()
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty is not None and isatty()) and os.environ.get("TERM") != "dumb"

    def update(self, done: int, total: int | None = None, *, items: int | None = None) -> None:
        """Record progress (and ``items`` done so far); redraw when it is time to."""
        if not self.enabled:
            return
        now = self._clock()
        with self._lock:
            if total is not None:
                self.total = max(1, total)
            if now - self._started < self._delay:
                return
            if self._last_draw is not None and now - self._last_draw < self._interval and done < self.total:
                return
            self._last_draw = now
            filled = round(self.width * min(done, self.total) / self.total)
            bar = "#" * filled + "." * (self.width - filled)
            rate = ""
            if items is not None:
                elapsed = now - self._started
                per_second = f", {items / elapsed:,.0f} {self._item_name}/s" if elapsed > 0 else ""
                rate = f", {items:,} {self._item_name}{per_second}"
            self.stream.write(f"\r{self.label} [{bar}] {self._counter(done, self.total)}{rate}")
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        """Erase the bar, if one was drawn, so that the output that follows starts clean."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._drawn = False


def _fraction(done: int, total: int) -> str:
    return f"{done}/{total}"
