"""Keep internal errors away from the host application, and tell about them once."""

from __future__ import annotations

import logging
import traceback

__all__ = ["log_internal_error", "log_once"]

logger = logging.getLogger("latency_budget")

# The project's own test suite flips this so that bugs fail loudly instead of being logged.
raise_internal_errors = False

_MAX_REMEMBERED = 256
_seen: set[object] = set()


def log_once(key: object, level: int, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` is seen; later repeats are dropped."""
    if key in _seen:
        return
    if len(_seen) < _MAX_REMEMBERED:
        _seen.add(key)
    logger.log(level, message, *args)


def log_internal_error(where: str, exc: BaseException) -> None:
    """Report a bug in this package caught in a span hook, without raising (outside tests).

    Repeats of the same error at the same place are logged once.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    origin = (frames[-1].filename, frames[-1].lineno) if frames else None
    key = (where, type(exc), origin)
    if key not in _seen:
        if len(_seen) < _MAX_REMEMBERED:
            _seen.add(key)
        logger.error("latency_budget: internal error in %s; the span was forwarded unannotated", where, exc_info=exc)
    if raise_internal_errors:
        raise exc
