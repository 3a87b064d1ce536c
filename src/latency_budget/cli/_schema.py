"""``latency-budget schema``: print the budget file's JSON Schema, for editors and CI linters."""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any

from latency_budget.cli._common import example_epilog, raw_help
from latency_budget.cli._output import emit_or_write

__all__ = ["SCHEMA_NAME", "register", "schema_text"]

SCHEMA_NAME = "budgets.schema.json"


def schema_text() -> str:
    """The JSON Schema (Draft 2020-12) of the budget file, as shipped in the package."""
    return resources.files("latency_budget._config").joinpath(SCHEMA_NAME).read_text(encoding="utf-8")


def register(commands: Any) -> None:
    """Add the ``schema`` subcommand."""
    parser = commands.add_parser(
        "schema",
        help="print the budget file's JSON Schema",
        description=(
            "Print the JSON Schema (Draft 2020-12) of the budget file. Point your editor at it with a first line\n"
            "'# yaml-language-server: $schema=budgets.schema.json' for completion and validation as you type;\n"
            "'latency-budget validate' runs the full check."
        ),
        epilog=example_epilog(
            "latency-budget schema > budgets.schema.json",
            "latency-budget schema -o .vscode/budgets.schema.json",
        ),
        formatter_class=raw_help(),
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the schema to FILE instead of standard output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the schema, or write it to ``args.output``."""
    emit_or_write(schema_text(), args.output)
    return 0
