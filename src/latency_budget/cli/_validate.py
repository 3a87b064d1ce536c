"""``latency-budget validate FILE``: check a budget file and summarise it in one line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from latency_budget._config import BudgetConfigError, load_budgets
from latency_budget._core.report import format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import terminal_text
from latency_budget.cli._common import example_epilog, raw_help
from latency_budget.cli._output import emit

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add the ``validate`` subcommand."""
    parser = commands.add_parser(
        "validate",
        help="check a budget file",
        description="Check a budget file. Exit 0 with a one-line summary, or 1 with the precise error.",
        epilog=example_epilog("latency-budget validate budgets.yaml"),
        formatter_class=raw_help(),
    )
    parser.add_argument("file", metavar="FILE", help="the budget YAML file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Validate ``args.file``; print the summary or the error."""
    try:
        config = load_budgets(args.file)
    except BudgetConfigError as exc:
        for line in exc.lines:
            print(f"latency-budget: {terminal_text(line)}", file=sys.stderr)
        return 1
    budgets = config.default
    stages = ", ".join(
        f"{terminal_text(b.name)} {format_ms(b.budget_ms)}"
        if b.budget_ms is not None
        else f"{terminal_text(b.name)} (tracked)"
        for b in budgets.stages
    )
    profiles = f", {len(config.profiles)} profile(s)" if config.profiles else ""
    total = format_ms(budgets.total_ms)
    emit(f"{terminal_text(args.file)}: OK: {plural(len(budgets.stages), 'stage')} ({stages}); total {total}{profiles}")
    return 0
