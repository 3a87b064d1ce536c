"""What every subcommand shares."""

from __future__ import annotations

import argparse

__all__ = ["CliError", "Subparsers", "example_epilog"]

Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A user error: printed as one line, exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def example_epilog(*examples: str) -> str:
    """An ``Examples:`` block for a subcommand's ``--help``."""
    return "examples:\n" + "\n".join(f"  {example}" for example in examples)


def raw_help() -> type[argparse.HelpFormatter]:
    """The help formatter that keeps example lines as written."""
    return argparse.RawDescriptionHelpFormatter
