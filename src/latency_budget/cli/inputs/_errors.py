"""The error every trace reader raises: one line that names the file and line, or the URL."""

from __future__ import annotations

from latency_budget.cli._common import CliError

__all__ = ["TraceInputError"]


class TraceInputError(CliError):
    """Input that cannot be read as traces; the CLI exits 2 with this message."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)
