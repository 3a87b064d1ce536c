"""Budget files: the YAML format, its validation and the loaded model."""

from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.loader import as_config, load_budgets
from latency_budget._config.model import (
    DEFAULT_PROFILE,
    BudgetConfig,
    BudgetSet,
    FirstTokenSource,
    Profile,
    StageBudget,
    StageDefinition,
)

__all__ = [
    "DEFAULT_PROFILE",
    "BudgetConfig",
    "BudgetConfigError",
    "BudgetSet",
    "FirstTokenSource",
    "Profile",
    "StageBudget",
    "StageDefinition",
    "as_config",
    "load_budgets",
]
