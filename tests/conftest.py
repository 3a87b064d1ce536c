"""Shared test setup: internal errors in span hooks fail tests instead of being logged.

``LATENCY_BUDGET_FORCE_PUBLIC_API=1`` runs the tests on the public-API fallback of
``latency_budget._sdk_internals`` (what the package does on an SDK whose internals the
probe rejects): every ``latency_budget`` module's binding of a ``_fast_*`` reader is
replaced by its ``_public_*`` twin for the session. ``scripts/test-sdk-range`` uses it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from latency_budget import _guard, _sdk_internals

FORCE_PUBLIC_API = "LATENCY_BUDGET_FORCE_PUBLIC_API"

_public_api: pytest.MonkeyPatch | None = None
_patched: list[str] = []


def _fast_path_bindings() -> Iterator[tuple[ModuleType, str, Callable[..., Any]]]:
    """(module, name, public twin) for each name in a loaded ``latency_budget`` module bound to a fast reader."""
    twins: dict[int, tuple[object, Callable[..., Any]]] = {}
    for name, fast in vars(_sdk_internals).items():
        public = getattr(_sdk_internals, name.replace("_fast_", "_public_", 1), None)
        if name.startswith("_fast_") and callable(fast) and callable(public):
            twins[id(fast)] = (fast, public)
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "latency_budget" or module_name.startswith("latency_budget.")):
            continue
        for name, value in list(vars(module).items()):
            fast, public = twins.get(id(value), (None, None))
            if public is not None and value is fast and not name.startswith("_fast_"):
                yield module, name, public


def pytest_configure(config: pytest.Config) -> None:
    """Under LATENCY_BUDGET_FORCE_PUBLIC_API=1, switch the whole session to the public-API fallback."""
    global _public_api
    if os.environ.get(FORCE_PUBLIC_API) != "1" or _public_api is not None:
        return
    _public_api = pytest.MonkeyPatch()
    for module, name, public in _fast_path_bindings():
        _public_api.setattr(module, name, public)
        _patched.append(f"{module.__name__}.{name}")
    if _sdk_internals.FAST_PATH and not _patched:
        raise pytest.UsageError(f"{FORCE_PUBLIC_API}=1: no fast reader of _sdk_internals is bound anywhere to replace")
    _public_api.setattr(_sdk_internals, "FAST_PATH", False)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _public_api
    if _public_api is not None:
        _public_api.undo()
        _public_api = None
        _patched.clear()


def pytest_report_header(config: pytest.Config) -> str:
    if _public_api is not None:
        return f"latency_budget: SDK fast path forced off ({FORCE_PUBLIC_API}=1): {', '.join(_patched)} -> public API"
    return f"latency_budget: SDK fast path {'on' if _sdk_internals.FAST_PATH else 'off (probe fell back)'}"


@pytest.fixture(autouse=True)
def _raise_internal_errors() -> Iterator[None]:
    """Make a bug in a processor hook raise in our own tests (users only get a log line)."""
    previous = _guard.raise_internal_errors
    _guard.raise_internal_errors = True
    yield
    _guard.raise_internal_errors = previous
