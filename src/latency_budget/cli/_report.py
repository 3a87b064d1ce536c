"""``latency-budget report TRACES``: per-stage percentiles and violations of recorded traces."""

from __future__ import annotations

import argparse
import json
from typing import Any

from latency_budget._encode import markdown_text, terminal_text
from latency_budget.cli._stats import optimisation

from ._common import example_epilog, raw_help
from ._html import render_html
from ._levers import LeverAnalysis, analyse_levers
from ._output import emit, write_file, wrote
from ._recorded import Recorded, add_budgets_argument, add_trace_arguments, load_recorded
from ._summary import closing_lines, optimisation_json, summary_json, summary_markdown, summary_table
from ._where import context_lines, levers_json, model_lines, quality_lines, where_lines

__all__ = ["register"]

_DESCRIPTION = """\
Per-stage latency of recorded traces: for each stage, the number of requests that
ran it, the p50, p95 and p99 of its time, and how many of those requests broke one
of its budgets; then the same end to end.

Then where to win: every latency lever the spans show (streaming, caching, model
choice, context size, output length, parallel calls, iterations), ranked by the time
it would save over all requests, with what to try and what each estimate rests on;
each stage's latency by model; and how latency grows with input tokens (a Theil-Sen
fit, shown only where the data supports one).

Stages come from --budgets FILE, or else from the built-in GenAI stages (retrieval,
model_call and tool_calls, without budgets). --html FILE also writes a self-contained
page: each stage's distribution against its budget, where to win, a chart of each
stage's models, the context-size scatter plots, and a waterfall of the slowest request
with its over-budget stages highlighted."""


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
    add_budgets_argument(parser, required=False, restage=True)
    parser.add_argument(
        "--format", "-f", choices=("table", "json", "markdown"), default="table", help="output format (default: table)"
    )
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report to FILE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report (and write the HTML page)."""
    recorded = load_recorded(args)
    levers = analyse_levers(recorded.reports, recorded.config)
    page = render_html(recorded, levers) if args.html else None
    if args.format == "json":
        output = json.dumps(
            {
                "budgets": recorded.budgets_label,
                "sources": list(recorded.traces.sources),
                **summary_json(recorded.summary),
                "input_repairs": recorded.traces.repairs.as_json(),
                **optimisation_json(optimisation(recorded.reports)),
                **levers_json(levers),
            },
            indent=2,
        )
    elif args.format == "markdown":
        output = _markdown(recorded, levers)
    else:
        output = _table(recorded, levers)
    if page is not None:
        write_file(args.html, page)
    emit(output)
    if page is not None:
        wrote(args.html)
    return 0


def _sections(*parts: list[str]) -> list[str]:
    """Non-empty parts, a blank line between them."""
    lines: list[str] = []
    for part in parts:
        if part:
            lines += ["", *part] if lines else part
    return lines


def _terminal_lines(text: str) -> str:
    """Text of one or more lines for a terminal: each line shown as terminal text."""
    return "\n".join(terminal_text(line) for line in text.split("\n"))


def _markdown_lines(text: str) -> str:
    """Prose of one or more lines as Markdown, each line ending in a hard break."""
    return "  \n".join(markdown_text(line) for line in text.split("\n"))


def _table(recorded: Recorded, levers: LeverAnalysis) -> str:
    summary = recorded.summary
    return "\n".join(
        _sections(
            [f"latency-budget report: {terminal_text(recorded.intro())}"],
            [summary_table(summary)],
            [_terminal_lines(line) for line in closing_lines(summary, optimisation(recorded.reports))],
            where_lines(levers),
            model_lines(levers),
            quality_lines(levers),
            context_lines(levers),
        )
    )


def _markdown(recorded: Recorded, levers: LeverAnalysis) -> str:
    summary = recorded.summary
    return "\n".join(
        _sections(
            ["### Latency by stage"],
            [markdown_text(recorded.intro() + ".")],
            [summary_markdown(summary)],
            [_markdown_lines(line) + "  " for line in closing_lines(summary, optimisation(recorded.reports))],
            [line + "  " if line[:1].isdigit() else line for line in where_lines(levers, markdown=True)],
            model_lines(levers, markdown=True),
            quality_lines(levers, markdown=True),
            context_lines(levers, markdown=True),
        )
    )
