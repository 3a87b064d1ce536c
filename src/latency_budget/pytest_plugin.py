"""pytest plugin (registered through the ``pytest11`` entry point): the ``latency_budget`` fixture.

The fixture is :class:`latency_budget.testing.BudgetChecker`: ``with latency_budget() as
result:`` checks a block against the default budget file, given by ``--latency-budgets
FILE`` or the ``latency_budgets`` ini option (relative to the rootdir). Disable the
plugin with ``-p no:latency_budget``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from latency_budget.testing import BudgetChecker

__all__ = ["latency_budget", "pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--latency-budgets`` and the ``latency_budgets`` ini option."""
    group = parser.getgroup("latency_budget", "latency budgets (otel-latency-budget)")
    group.addoption(
        "--latency-budgets",
        dest="latency_budgets",
        metavar="FILE",
        default=None,
        help="default budget file for the latency_budget fixture",
    )
    parser.addini(
        "latency_budgets", "default budget file for the latency_budget fixture, relative to the rootdir", default=""
    )


@pytest.fixture
def latency_budget(request: pytest.FixtureRequest) -> BudgetChecker:
    """Check latency budgets: ``with latency_budget() as result: ...`` (see latency_budget.testing)."""
    from latency_budget.testing import BudgetChecker  # noqa: PLC0415 (keeps pytest's start-up light)

    config = request.config
    option: str | None = config.getoption("latency_budgets")
    ini = str(config.getini("latency_budgets") or "")
    if option:
        default: Path | None = Path(option)
    elif ini:
        default = config.rootpath / ini
    else:
        default = None
    return BudgetChecker(default)
