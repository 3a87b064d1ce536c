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
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = max(1, total)
        self.label = label
        self.width = width
        self._clock = clock
        self._started = clock()
        self._delay = delay_s
        self._interval = interval_s
        self._last_draw: float | None = None
        self._drawn = False
        self._lock = threading.Lock()
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty is not None and isatty()) and os.environ.get("TERM") != "dumb"

    def update(self, done: int, total: int | None = None) -> None:
        """Record progress; redraw when it is time to."""
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
            self.stream.write(f"\r{self.label} [{bar}] {done}/{self.total}")
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        """Erase the bar, if one was drawn, so that the output that follows starts clean."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._drawn = False
