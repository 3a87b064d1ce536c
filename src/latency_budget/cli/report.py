"""``latency-budget report TRACES``: per-stage percentiles and violations of recorded traces."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from latency_budget.cli.stats import optimisation

from ._common import example_epilog, raw_help
from ._html import render_html
from ._output import emit, write_file
from ._recorded import Recorded, add_budgets_argument, add_trace_arguments, load_recorded
from ._summary import closing_lines, optimisation_json, summary_json, summary_markdown, summary_table

__all__ = ["register"]

_DESCRIPTION = """\
Per-stage latency of recorded traces: for each stage, the number of requests that
ran it, the p50, p95 and p99 of its time, and how many of those requests broke one
of its budgets; then the same end to end.

Stages come from --budgets FILE, or else from the built-in GenAI stages (retrieval,
model_call and tool_calls, without budgets). --html FILE also writes a self-contained
page: each stage's distribution against its budget, and a waterfall of the slowest
request with its over-budget stages highlighted."""


def register(commands: Any) -> None:
    """Add the ``report`` subcommand."""
    parser = commands.add_parser(
        "report",
        help="per-stage percentiles and violations of recorded traces",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget report traces.jsonl",
            "latency-budget report traces.jsonl --budgets budgets.yaml --html latency.html",
            "latency-budget report --jaeger http://localhost:16686 --service support-assistant --format json",
        ),
        formatter_class=raw_help(),
    )
    add_trace_arguments(parser)
    add_budgets_argument(parser, required=False)
    parser.add_argument(
        "--format", "-f", choices=("table", "json", "markdown"), default="table", help="output format (default: table)"
    )
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report to FILE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report (and write the HTML page)."""
    recorded = load_recorded(args)
    page = render_html(recorded) if args.html else None
    if args.format == "json":
        output = json.dumps(
            {
                "budgets": recorded.budgets_label,
                "sources": list(recorded.traces.sources),
                **summary_json(recorded.summary),
                "input_repairs": recorded.traces.repairs.as_json(),
                **optimisation_json(optimisation(recorded.reports)),
            },
            indent=2,
        )
    elif args.format == "markdown":
        output = _markdown(recorded)
    else:
        output = _table(recorded)
    if page is not None:
        write_file(args.html, page)
    emit(output)
    if page is not None:
        print(f"Wrote {args.html}.", file=sys.stderr)
    return 0


def _table(recorded: Recorded) -> str:
    summary = recorded.summary
    return "\n".join(
        [
            f"latency-budget report: {recorded.intro()}",
            "",
            summary_table(summary),
            "",
            *closing_lines(summary, optimisation(recorded.reports)),
        ]
    )


def _markdown(recorded: Recorded) -> str:
    summary = recorded.summary
    return "\n".join(
        [
            "### Latency by stage",
            "",
            recorded.intro() + ".",
            "",
            summary_markdown(summary),
            "",
            *(line.replace("\n", "  \n") + "  " for line in closing_lines(summary, optimisation(recorded.reports))),
        ]
    )
