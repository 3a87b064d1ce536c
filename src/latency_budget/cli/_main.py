"""Argument parsing and dispatch. User errors print one line and exit non-zero."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from latency_budget._encode import terminal_text
from latency_budget._version import __version__
from latency_budget.cli import (
    _check,
    _compare,
    _demo,
    _doctor,
    _init,
    _report,
    _rules,
    _schema,
    _serve,
    _suggest,
    _validate,
)
from latency_budget.cli._common import EXIT_INTERNAL, CliError, exit_status
from latency_budget.cli._output import finish_output

__all__ = ["main"]

_SUBCOMMANDS = (_demo, _init, _validate, _check, _report, _compare, _suggest, _doctor, _rules, _schema, _serve)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per subcommand module."""
    parser = _Parser(
        prog="latency-budget",
        description="Per-stage latency budgets for AI requests, inside OpenTelemetry.",
        epilog="Run 'latency-budget COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _SUBCOMMANDS:
        module.register(commands)
    for name, subparser in commands.choices.items():
        if "exit status:" not in (subparser.epilog or ""):
            subparser.epilog = ((subparser.epilog or "") + "\n\n" + exit_status(name)).lstrip("\n")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (see ``EXIT_STATUS``); never a traceback."""
    _tolerate_unencodable_output()
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(argv)
        code: int = args.run(args)
        finish_output()
    except CliError as exc:
        for line in exc.lines:
            _error(line)
        return exc.exit_code
    except SystemExit:  # argparse: --help, --version and usage errors, as before
        _quiet_finish()
        raise
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:  # stdout closed early, e.g. piped into `head`: not an error
        _quiet_finish()
        return 0
    except MemoryError:
        _error(f"out of memory; {_memory_advice(args)}")
        return 2
    except Exception as exc:  # a bug of ours: still one line, and a code of its own
        _error(f"internal error (please report it): {_describe(exc)}")
        return EXIT_INTERNAL
    return code


def _memory_advice(args: argparse.Namespace | None) -> str:
    """What the command that ran out of memory can lower: only flags it has."""
    if args is not None and hasattr(args, "max_spans"):
        return "lower the input limits (--max-input-size, --max-spans) or split the input"
    if args is not None and hasattr(args, "max_rules"):
        return "lower --max-rules, or split the budget file"
    return "give it a smaller input"


def _error(message: str) -> None:
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"latency-budget: {terminal_text(message)}\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _quiet_finish() -> None:
    with contextlib.suppress(CliError):
        finish_output()


def _tolerate_unencodable_output() -> None:
    # Span names come from recordings and may hold lone surrogates ("\\ud800" in JSON):
    # print them escaped rather than fail on them.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return (text if len(text) <= 200 else text[:197] + "...") + where
