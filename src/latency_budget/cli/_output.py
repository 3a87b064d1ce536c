"""Writing the CLI's output: a closed pipe is no error, a full disk is one line and exit code 4.

``latency-budget check ... | head`` closes standard output early: the rest of the output
is dropped quietly and the command still exits with its verdict (so does a command
started with stdout closed). A write that fails
otherwise (``/dev/full``, a disk that filled up, a file that cannot be created) is an
:class:`OutputError`: one line, exit code ``EXIT_OUTPUT``.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from latency_budget._encode import terminal_text

from ._common import CliError

__all__ = ["EXIT_OUTPUT", "OutputError", "emit", "emit_or_write", "finish_output", "warn", "write_file", "wrote"]

EXIT_OUTPUT = 4
_CLOSED = (errno.EPIPE, errno.EBADF)  # the reader went away, or stdout was closed under us: not an error


class OutputError(CliError):
    """The output could not be written (not a closed pipe: that is quietly accepted)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=EXIT_OUTPUT)


def emit(text: str, *, end: str = "\n") -> None:
    """Write ``text`` to standard output; a closed stdout drops it, any other failure is an OutputError."""
    stream = sys.stdout
    if stream is None:  # started with stdout closed (`>&-`): nobody to tell
        return
    try:
        stream.write(text + end)
    except OSError as exc:
        if exc.errno not in _CLOSED:
            raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None
        _drop_stdout()


def finish_output() -> None:
    """Flush standard output (what ``emit`` buffered); as ``emit``, a closed pipe is quietly accepted."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except OSError as exc:
        _drop_stdout()  # the interpreter's own flush at exit must not fail on the same buffer again
        if exc.errno not in _CLOSED:
            raise OutputError(f"cannot write the output: {exc.strerror or exc}") from None
    except ValueError:  # closed by someone else: nothing left to write
        return


def write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8); a failure is an OutputError naming the file."""
    try:
        Path(path).write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def wrote(path: str) -> None:
    """Say on standard error that ``path`` was written: ``Wrote PATH.``, the same line for every command."""
    print(f"Wrote {terminal_text(path)}.", file=sys.stderr)


def emit_or_write(text: str, path: str | None) -> None:
    """Print ``text`` as it is (it ends its own lines), or write it to ``path`` and say so."""
    if path is None:
        emit(text, end="")
        return
    write_file(path, text)
    wrote(path)


def warn(message: str) -> None:
    """One ``latency-budget: warning:`` line on standard error (dropped if stderr is gone)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"latency-budget: warning: {terminal_text(message)}\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _drop_stdout() -> None:
    # Point stdout at /dev/null, so the rest of the output and the interpreter's final
    # flush go nowhere instead of raising again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
