"""Argument parsing and dispatch. User errors print one line and exit non-zero."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from latency_budget._version import __version__
from latency_budget.cli import check, demo, report, rules, schema, suggest, validate
from latency_budget.cli._common import CliError

__all__ = ["main"]

_SUBCOMMANDS = (demo, validate, check, report, suggest, rules, schema)


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except CliError as exc:
        print(f"latency-budget: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("latency-budget: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`: not an error worth a traceback
        # Point stdout at /dev/null so the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code
