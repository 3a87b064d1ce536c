"""The one error type that configuration problems raise, and how messages quote a bad value."""

from __future__ import annotations

from latency_budget._encode import visible

__all__ = ["BudgetConfigError", "describe_value"]


class BudgetConfigError(ValueError):
    """A budget file (or text) that cannot be used.

    The message always starts with ``<file>:<line>: <key path>:`` so an editor or a
    CI log points straight at the offending key.
    """

    def __init__(self, source: str, line: int | None, path: str, message: str) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.detail = message
        # Keys and paths are shown escaped: a key holding ESC or a newline cannot reach a terminal raw.
        where = f"{visible(source)}:{line}" if line is not None else visible(source)
        prefix = f"{where}: {visible(path)}: " if path else f"{where}: "
        super().__init__(prefix + message)


def describe_value(value: object, *, mapping: str = "a mapping", null: str = "nothing (null)") -> str:
    """A bad value as an error message quotes it: its kind for containers, else a repr cut at 60 characters.

    ``mapping`` and ``null`` name those in the input's own terms (JSON says ``an object``, ``null``).
    """
    if isinstance(value, dict):
        return mapping
    if isinstance(value, list):
        return "a list"
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
