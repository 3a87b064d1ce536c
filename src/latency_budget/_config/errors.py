"""The one error type that configuration problems raise."""

from __future__ import annotations


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
        where = f"{source}:{line}" if line is not None else source
        prefix = f"{where}: {path}: " if path else f"{where}: "
        super().__init__(prefix + message)
