"""Argument parsing and dispatch. User errors print one line and exit non-zero."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from latency_budget._version import __version__
from latency_budget.cli import validate
from latency_budget.cli._common import CliError

__all__ = ["main"]

_SUBCOMMANDS = (validate,)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per subcommand module."""
    parser = argparse.ArgumentParser(
        prog="latency-budget",
        description="Per-stage latency budgets for AI requests, inside OpenTelemetry.",
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
    return code
