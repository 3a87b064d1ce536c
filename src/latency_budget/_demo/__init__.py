"""``latency-budget demo``: a simulated AI support assistant, traced and budget-checked.

:func:`run_demo` replays seeded, simulated requests as real OpenTelemetry spans through
:class:`~latency_budget.LatencyBudgetProcessor`; :func:`example_budgets` loads the budget
file it is meant for (the repository's ``budgets.example.yaml``, shipped in the package).
"""

from __future__ import annotations

from importlib import resources

from latency_budget._config import BudgetConfig, load_budgets
from latency_budget._demo.run import DEMO_BUDGETS_ATTRIBUTE, DemoRun, run_demo

__all__ = [
    "DEMO_BUDGETS_ATTRIBUTE",
    "EXAMPLE_BUDGETS_NAME",
    "DemoRun",
    "example_budgets",
    "example_budgets_text",
    "run_demo",
]

EXAMPLE_BUDGETS_NAME = "budgets.example.yaml"


def example_budgets_text() -> str:
    """The text of the packaged ``budgets.example.yaml``."""
    return resources.files(__name__).joinpath(EXAMPLE_BUDGETS_NAME).read_text(encoding="utf-8")


def example_budgets() -> BudgetConfig:
    """The demo's budgets, loaded from the packaged ``budgets.example.yaml``."""
    return load_budgets(text=example_budgets_text(), source=f"{EXAMPLE_BUDGETS_NAME} (built in)")
