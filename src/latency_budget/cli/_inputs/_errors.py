"""The error every trace reader raises: one line that names the file and line, or the URL."""

from __future__ import annotations

from latency_budget.cli._common import CliError

__all__ = ["TraceInputError", "show"]


class TraceInputError(CliError):
    """Input that cannot be read as traces; the CLI exits 2 with this message."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


def show(value: object, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters: values from a recording may be any size."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
