"""``latency-budget rules FILE``: Prometheus recording and alerting rules from a budget file's objectives."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from latency_budget._config import BudgetConfigError, load_budgets
from latency_budget._encode import terminal_text, visible

from ._common import CliError, example_epilog, http_url, raw_help, service_name
from ._output import emit_or_write
from ._slo_rules import (
    DEFAULT_MAX_RULES,
    DEFAULT_PERIOD,
    WORKBOOK_BURN_RATES,
    BurnRate,
    TooManyRules,
    duration_seconds,
    parse_burn_rate,
    rules_document,
)

__all__ = ["register"]

_DESCRIPTION = """\
Write a Prometheus rules file from a budget file.

Recording rules: for every budget (each stage's, total_ms, first_token_ms), under every
profile, the share of requests that broke it, over each window the alerts use, from the
latency_budget_requests_total counter as collector-config.yaml exports it.

Alerts: for every budget with an objective ('objective: 99%'), multi-window, multi-burn-rate
alerts as in The Site Reliability Workbook: by default page when 1h and 5m both burn the
error budget 14.4x as fast as the objective allows, page at 6x over 6h and 30m, and a
ticket at 1x over 3d and 6h. --burn-rate replaces these rows. Each alert carries the
label latency_budget_burn_rate (its row, e.g. page:1h/5m:14.4).

Error-budget records, per objective: the objective, its error budget (1 - objective), the
burn rate over the SLO period (--slo-period, default 30d) and the share of the error budget
left over it.

Limit: stages (with total and first token) x (profiles + 1) x rows may be at most
--max-rules (default 5000), checked before anything is built.

Exit status: 0 written, 2 unusable input (a bad budget file or option), 4 the output could not be
written (a file that cannot be created, a full disk)."""


def register(commands: Any) -> None:
    """Add the ``rules`` subcommand."""
    parser = commands.add_parser(
        "rules",
        help="write Prometheus recording and alerting rules from a budget file's objectives",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget rules -b budgets.yaml > latency-budget.rules.yml",
            "latency-budget rules -b budgets.yaml --service support-assistant -o rules.yml",
            "latency-budget rules -b budgets.yaml --burn-rate page:1h/5m:14.4 --burn-rate ticket:1d/2h:3",
        ),
        formatter_class=raw_help(),
    )
    parser.add_argument("--budgets", "-b", metavar="FILE", help="the budget YAML file (required)")
    parser.add_argument("file", metavar="FILE", nargs="?", help="the budget YAML file, as --budgets (older spelling)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the rules to FILE instead of standard output")
    parser.add_argument(
        "--service",
        metavar="NAME",
        type=service_name,
        help="only series of this service (the service_name label); default: every service, one alert each",
    )
    parser.add_argument(
        "--burn-rate",
        metavar="SEVERITY:LONG/SHORT:RATE",
        action="append",
        type=_burn_rate,
        dest="burn_rates",
        help="an alert row, repeatable, replacing the default ones: "
        + ", ".join(f"{b.severity}:{b.long_window}/{b.short_window}:{b.rate:g}" for b in WORKBOOK_BURN_RATES),
    )
    parser.add_argument(
        "--jaeger",
        metavar="URL",
        default="http://localhost:16686",
        type=http_url,
        help="the Jaeger UI that alert annotations link to, http or https (default: http://localhost:16686)",
    )
    parser.add_argument(
        "--slo-period",
        metavar="DURATION",
        default=DEFAULT_PERIOD,
        type=_duration,
        help=f"the SLO period of the error-budget records (default: {DEFAULT_PERIOD})",
    )
    parser.add_argument(
        "--max-rules",
        metavar="N",
        type=_positive,
        default=DEFAULT_MAX_RULES,
        help=f"largest stages x profiles x rows to write (default: {DEFAULT_MAX_RULES})",
    )
    parser.set_defaults(run=run)


def _burn_rate(text: str) -> BurnRate:
    try:
        return parse_burn_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> str:
    try:
        duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above zero, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Load the budget file, write its rules, and print any notes to standard error."""
    if args.budgets is not None and args.file is not None:
        raise CliError("give the budget file once: -b FILE")
    args.file = args.budgets if args.budgets is not None else args.file
    if args.file is None:
        raise CliError("rules needs the budget file: -b FILE")
    if not args.file.isprintable():
        # The path is written into comments, annotations and a pasted command.
        raise CliError(f"the budget file's path cannot hold control or line-break characters: {visible(args.file)!r}")
    try:
        config = load_budgets(args.file)
    except BudgetConfigError as exc:
        raise CliError.from_budgets(exc) from None
    try:
        text, notes = rules_document(
            config,
            source=args.file,
            burn_rates=args.burn_rates or WORKBOOK_BURN_RATES,
            service=args.service,
            jaeger_url=args.jaeger,
            period=args.slo_period,
            max_rules=args.max_rules,
        )
    except TooManyRules as exc:
        raise CliError(f"{exc} (--max-rules N raises it)") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    for note in notes:
        print(f"latency-budget: note: {terminal_text(note)}", file=sys.stderr)
    emit_or_write(text, args.output)
    return 0
