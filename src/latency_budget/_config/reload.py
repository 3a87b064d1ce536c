"""Live reload: watch a budget file and hand each good new version to the processor.

:class:`BudgetFileWatcher` re-reads the file when asked (:meth:`~BudgetFileWatcher.check`)
or every N seconds on a daemon thread (:meth:`~BudgetFileWatcher.start`), never on the
span hot path. A changed file that loads is passed to ``on_change``; one that does not
keeps the last good configuration and logs the loader's error (file, line and key) once
per broken version, never raising into the application.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.loader import load_budgets
from latency_budget._config.model import BudgetConfig

__all__ = ["RELOAD_INTERVAL_ENV", "BudgetFileWatcher", "reload_interval", "watch_budgets"]

logger = logging.getLogger(__name__)

RELOAD_INTERVAL_ENV = "OTEL_LATENCY_BUDGET_RELOAD_INTERVAL"


def reload_interval(argument: float | None, env: Mapping[str, str] | None = None) -> float | None:
    """The reload interval in seconds: ``argument``, else the environment variable, else off (None).

    A bad argument is a programming error (``ValueError``); a bad environment value logs
    one warning and is ignored.
    """
    if argument is not None:
        if isinstance(argument, bool) or not isinstance(argument, (int, float)) or not _positive(argument):
            raise ValueError(f"reload_interval_s must be a positive number of seconds, got {argument!r}")
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
    """Reloads one budget file when its content changes.

    The file is read and hashed on every check: mtime and size miss a rewrite within
    the file system's timestamp granularity that keeps the size, and budget files are
    small. ``source`` (default: the path as given) names the file in error messages;
    the path is resolved once, so a later ``chdir`` does not change which file is read.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_change: Callable[[BudgetConfig], object],
        *,
        source: str | None = None,
    ) -> None:
        self.source = source or os.fspath(path)
        self._path = Path(os.path.abspath(path))
        self._on_change = on_change
        self._lock = threading.Lock()
        self._digest: bytes | None = None  # of the content last loaded (or found broken)
        self._failure: object = None  # what the last logged failure was about
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
            data = self._read()
            config = self._parse(data)
            self._digest = hashlib.sha256(data).digest()
            return config

    def assume_current(self) -> None:
        """Take the file's present content as the one already loaded (for a config loaded elsewhere)."""
        with self._lock:
            try:
                self._digest = hashlib.sha256(self._read()).digest()
            except BudgetConfigError:
                self._digest = None

    def check(self) -> bool:
        """Reload if the file changed. True when a new configuration was handed to ``on_change``.

        Never raises: a broken or unreadable file keeps the last good configuration and
        logs one error per broken version (an unchanged broken file is not logged again).
        """
        try:
            with self._lock:
                return self._check()
        except Exception:  # a bug here must not stop the watcher thread or reach the application
            logger.exception("latency_budget: internal error while checking %s for changes", self.source)
            return False

    def _check(self) -> bool:
        try:
            before = self._path.stat()
            data = self._path.read_bytes()
            after = self._path.stat()
        except OSError as exc:
            self._fail(("unreadable", exc.errno), self._unreadable(exc))
            return False
        if isinstance(self._failure, tuple):
            self._failure = None  # readable again: a later read failure is news
        if (before.st_mtime_ns, before.st_size) != (after.st_mtime_ns, after.st_size):
            return False  # being written right now: look again next time, without a false alarm
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            return False
        try:
            config = self._parse(data)
        except BudgetConfigError as exc:
            self._digest = digest
            self._fail(digest, exc)
            return False
        self._digest = digest
        self._failure = None
        self._on_change(config)
        logger.info("latency_budget: reloaded budgets from %s", self.source)
        return True

    def _read(self) -> bytes:
        try:
            return self._path.read_bytes()
        except OSError as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: OSError) -> BudgetConfigError:
        return BudgetConfigError(self.source, None, "", f"cannot read budget file: {exc.strerror or exc}")

    def _parse(self, data: bytes) -> BudgetConfig:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BudgetConfigError(self.source, None, "", f"not UTF-8 text: {exc.reason}") from None
        return load_budgets(text=text, source=self.source)

    def _fail(self, key: object, exc: Exception) -> None:
        if key == self._failure:
            return
        self._failure = key
        logger.error("latency_budget: budget reload failed, keeping the last good budgets: %s", exc)

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
        """Stop the interval thread and wait up to ``timeout_s`` for it; safe to call twice."""
        self._interval = None
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _after_fork_in_child(self) -> None:
        # Only the forking thread survives a fork: take fresh locks and restart the thread.
        self._lock = threading.Lock()
        self._thread = None
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
