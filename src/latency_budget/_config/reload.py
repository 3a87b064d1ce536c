"""Live reload: watch a budget file and hand each good new version to the processor.

:class:`BudgetFileWatcher` re-reads the file when asked (:meth:`~BudgetFileWatcher.check`)
or every N seconds on a daemon thread (:meth:`~BudgetFileWatcher.start`), never on the
span hot path. A changed file that loads, once it has stopped changing, is passed to
``on_change``; one that does not keeps the last good configuration and logs the loader's
error (file, line and key) once per broken version, never raising into the application.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.loader import load_budgets
from latency_budget._config.model import BudgetConfig
from latency_budget._config.yaml_source import decode_budget_text, read_budget_file

__all__ = [
    "MIN_RELOAD_INTERVAL_S",
    "RELOAD_INTERVAL_ENV",
    "SETTLE_S",
    "BudgetFileWatcher",
    "reload_interval",
    "watch_budgets",
]

logger = logging.getLogger(__name__)

RELOAD_INTERVAL_ENV = "OTEL_LATENCY_BUDGET_RELOAD_INTERVAL"
SETTLE_S = 2.0
"""A changed budget file is loaded once it has stayed unchanged this long (seconds)."""
MIN_RELOAD_INTERVAL_S = 1.0
"""The shortest reload interval (seconds): at most one check of the file a second."""


def reload_interval(argument: float | None, env: Mapping[str, str] | None = None) -> float | None:
    """The reload interval in seconds: ``argument``, else the environment variable, else off (None).

    Below :data:`MIN_RELOAD_INTERVAL_S`, a bad argument is a programming error
    (``ValueError``); a bad environment value logs one warning and is ignored.
    """
    if argument is not None:
        if isinstance(argument, bool) or not isinstance(argument, (int, float)) or not _positive(argument):
            raise ValueError(f"reload_interval_s must be a positive number of seconds, got {argument!r}")
        if argument < MIN_RELOAD_INTERVAL_S:
            raise ValueError(f"reload_interval_s must be at least {MIN_RELOAD_INTERVAL_S:g} second, got {argument!r}")
        return float(argument)
    raw = (os.environ if env is None else env).get(RELOAD_INTERVAL_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not _positive(value):
        logger.warning(
            "latency_budget: %s=%r is not a positive number of seconds; live reload stays off", RELOAD_INTERVAL_ENV, raw
        )
        return None
    if value < MIN_RELOAD_INTERVAL_S:
        logger.warning(
            "latency_budget: %s=%r is below the floor of %g second; live reload stays off",
            RELOAD_INTERVAL_ENV,
            raw,
            MIN_RELOAD_INTERVAL_S,
        )
        return None
    return value


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def watch_budgets(
    budgets: BudgetConfig | str | os.PathLike[str], on_change: Callable[[BudgetConfig], object]
) -> tuple[BudgetConfig, BudgetFileWatcher | None]:
    """Load ``budgets`` (a path or a loaded config) and a watcher for its file, if it has one.

    A path is loaded now (a broken file raises :class:`BudgetConfigError`). A loaded
    config is watched when its ``source`` names an existing file; its changes from then
    on are picked up. Configs loaded from text have no file and no watcher.
    """
    if isinstance(budgets, BudgetConfig):
        if not os.path.isfile(budgets.source):
            return budgets, None
        watcher = BudgetFileWatcher(budgets.source, on_change)
        watcher.assume_current()
        return budgets, watcher
    watcher = BudgetFileWatcher(budgets, on_change)
    return watcher.load(), watcher


class BudgetFileWatcher:
    """Reloads one budget file when its content changes, once the change has settled.

    The file is read and hashed on every check: mtime and size miss a rewrite within
    the file system's timestamp granularity that keeps the size, and budget files are
    small (see :mod:`latency_budget._config.limits`). A changed version is loaded only
    once it has stayed the same (device, inode, size, mtime and content) for
    ``settle_s`` seconds, judged by its mtime or by when this watcher first saw it, so
    a file caught in the middle of being written is never judged; a check that finds
    a change too recent arms one follow-up check for when it will have settled.
    Reading never blocks: a FIFO or a device is refused without waiting for a writer.

    ``source`` (default: the path as given) names the file in error messages; the path
    is resolved once, so a later ``chdir`` does not change which file is read; its
    symlinks are followed at every check, so a Kubernetes ConfigMap volume's update (its
    ``..data`` link replaced at once) is seen as one new version. ``on_failure``, when
    given, is told of each failure (once per broken version) instead of the log. ``clock``
    (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_change: Callable[[BudgetConfig], object],
        *,
        source: str | None = None,
        settle_s: float = SETTLE_S,
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[Exception], object] | None = None,
    ) -> None:
        if not (_positive(settle_s) or settle_s == 0):
            raise ValueError(f"settle_s must be a number of seconds, got {settle_s!r}")
        self.source = source or os.fspath(path)
        self._path = Path(os.path.abspath(path))
        self._on_change = on_change
        self._on_failure = on_failure
        self._settle_s = settle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._digest: bytes | None = None  # of the content last loaded (or found broken)
        self._failure: object = None  # what the last logged failure was about
        self._pending: tuple[object, float] | None = None  # a changed version not settled yet, first seen when
        self._follow_up: threading.Timer | None = None
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval: float | None = None
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := ref()) is not None and method())

    # -- loading -----------------------------------------------------------------------

    def load(self) -> BudgetConfig:
        """Load the file now and remember its content; raises :class:`BudgetConfigError`."""
        with self._lock:
            data = read_budget_file(self._path, self.source).data
            config = self._parse(data)
            self._digest = hashlib.sha256(data).digest()
            return config

    def assume_current(self) -> None:
        """Take the file's present content as the one already loaded (for a config loaded elsewhere)."""
        with self._lock:
            try:
                self._digest = hashlib.sha256(read_budget_file(self._path, self.source).data).digest()
            except BudgetConfigError:
                self._digest = None

    def check(self) -> bool:
        """Reload if the file changed and has settled. True when a new configuration was handed to ``on_change``.

        Never raises and never blocks on the file: a broken or unreadable file keeps the
        last good configuration and logs one error per broken version (an unchanged broken
        file is not logged again), whatever the error.
        """
        try:
            with self._lock:
                return self._check()
        except Exception as exc:  # a bug here must not stop the watcher thread or reach the application
            self._fail(("internal", type(exc), str(exc)), exc, internal=True)
            return False

    def _check(self) -> bool:
        try:
            snapshot = read_budget_file(self._path, self.source)
        except BudgetConfigError as exc:
            self._fail(("unreadable", exc.detail), exc)
            return False
        if isinstance(self._failure, tuple):
            self._failure = None  # readable again: a later read failure is news
        if snapshot.changed_while_read:
            self._pending = None  # being written right now: look again soon, without a false alarm
            self._arm_follow_up(self._settle_s)
            return False
        digest = hashlib.sha256(snapshot.data).digest()
        if digest == self._digest:
            self._pending = None
            return False
        version = (snapshot.version, digest)
        now = self._clock()
        if self._pending is None or self._pending[0] != version:
            self._pending = (version, now)
        still_for = max(now - self._pending[1], (time.time_ns() - snapshot.mtime_ns) / 1e9)
        if still_for < self._settle_s:
            # Changed moments ago: perhaps half written. Load it once it has stayed as it is.
            self._arm_follow_up(self._settle_s - still_for)
            return False
        self._pending = None
        self._digest = digest
        try:
            config = self._parse(snapshot.data)
        except BudgetConfigError as exc:
            self._fail(digest, exc)
            return False
        except Exception as exc:  # not the loader's own error: still logged once for this version
            self._fail(digest, exc, internal=True)
            return False
        self._failure = None
        self._on_change(config)
        logger.info("latency_budget: reloaded budgets from %s", self.source)
        return True

    def _parse(self, data: bytes) -> BudgetConfig:
        return load_budgets(text=decode_budget_text(data, self.source), source=self.source)

    def _fail(self, key: object, exc: Exception, *, internal: bool = False) -> None:
        if key == self._failure:
            return
        self._failure = key
        if self._on_failure is not None:
            try:
                self._on_failure(exc)
            except Exception as error:  # the watcher goes on whatever the callback does
                logger.error("latency_budget: reload failure callback raised: %r", error)
            return
        if internal:
            logger.error(
                "latency_budget: internal error while checking %s for changes (logged once): %r",
                self.source,
                exc,
                exc_info=exc,
            )
        else:
            logger.error("latency_budget: budget reload failed, keeping the last good budgets: %s", exc)

    def _arm_follow_up(self, delay_s: float) -> None:
        timer = self._follow_up
        if self._closed or (timer is not None and timer.is_alive()):
            return
        timer = threading.Timer(max(delay_s, 0.01) + 0.01, _follow_up, args=(weakref.ref(self),))
        timer.name = "latency-budget-reload-settle"
        timer.daemon = True
        self._follow_up = timer
        timer.start()

    # -- the interval thread -------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the interval thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, interval_s: float, *, wakeup: threading.Event | None = None) -> None:
        """Check every ``interval_s`` seconds on a daemon thread until :meth:`stop`.

        ``wakeup`` replaces the event the thread waits on between checks (and that
        :meth:`stop` sets): tests pass one whose ``wait`` they control.
        """
        if not _positive(interval_s):
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s!r}")
        if self.running:
            return
        self._interval = interval_s
        self._closed = False
        self._stop = wakeup if wakeup is not None else threading.Event()
        self._spawn()

    def _spawn(self) -> None:
        assert self._interval is not None
        self._thread = threading.Thread(
            target=_watch,
            args=(weakref.ref(self), self._stop, self._interval),
            name="latency-budget-reload",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the interval thread (and any follow-up check) and wait up to ``timeout_s``; safe to call twice."""
        self._interval = None
        self._closed = True
        self._stop.set()
        timer = self._follow_up
        if timer is not None:
            timer.cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _after_fork_in_child(self) -> None:
        # Only the forking thread survives a fork: take fresh locks and restart the thread.
        self._lock = threading.Lock()
        self._thread = None
        self._follow_up = None
        if self._interval is not None and not self._stop.is_set():
            self._stop = threading.Event()
            self._spawn()


def _watch(ref: weakref.ref[BudgetFileWatcher], stop: threading.Event, interval_s: float) -> None:
    # Holds the watcher only weakly between checks, so a processor dropped without
    # shutdown() does not live on because of its reload thread.
    while not stop.wait(interval_s):
        watcher = ref()
        if watcher is None:
            return
        watcher.check()
        del watcher


def _follow_up(ref: weakref.ref[BudgetFileWatcher]) -> None:
    watcher = ref()
    if watcher is not None:
        watcher.check()
