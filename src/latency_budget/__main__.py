"""``python -m latency_budget``: the command-line interface."""

import sys

from latency_budget.cli import main

sys.exit(main())
