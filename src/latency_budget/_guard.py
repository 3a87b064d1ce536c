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


def _first_time(key: object) -> bool:
    """Whether ``key`` is new. Once the memory is full, new keys are suppressed too (said once)."""
    if key in _seen:
        return False
    if len(_seen) >= _MAX_REMEMBERED:
        if _FULL not in _seen:
            _seen.add(_FULL)
            logger.warning("latency_budget: too many distinct messages; further new ones are suppressed")
        return False
    _seen.add(key)
    return True


_FULL = object()


def log_once(key: object, level: int, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` is seen; later repeats are dropped."""
    if _first_time(key):
        logger.log(level, message, *args)


def log_internal_error(where: str, exc: BaseException) -> None:
    """Report a bug in this package caught in a span hook, without raising (outside tests).

    Repeats of the same error at the same place are logged once.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    origin = (frames[-1].filename, frames[-1].lineno) if frames else None
    key = (where, type(exc), origin)
    if _first_time(key):
        logger.error("latency_budget: internal error in %s; the span was forwarded unannotated", where, exc_info=exc)
    if raise_internal_errors:
        raise exc
