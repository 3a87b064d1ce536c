"""The ``latency-budget`` command line. Each subcommand lives in its own module."""

from latency_budget.cli._main import main

__all__ = ["main"]
