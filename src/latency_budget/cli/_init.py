"""``latency-budget init``: write a commented budget file to start from, or draft one from a recording."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from latency_budget._config import BudgetConfigError, load_budgets
from latency_budget._encode import terminal_text

from ._common import EXIT_INTERNAL, CliError, example_epilog, raw_help
from ._output import emit, write_file, wrote
from ._recorded import add_budgets_argument, add_trace_arguments, load_recorded
from ._suggest import draft

__all__ = ["STARTER", "register"]

_DESCRIPTION = """\
Write a budget file to start from: a commented file with the built-in GenAI stages
(retrieval, model_call, tool_calls) and placeholder budgets, or, with --from, one drafted
from a recording of your app as `suggest` drafts it (each budget the observed p95 x 1.2).
Edit it, then record your app's traces and check them (see docs/cli.md, "Record your
traces"). An existing file is left alone unless --force."""

STARTER = """\
# Latency budgets for your AI requests, written by `latency-budget init`.
#
# Times are milliseconds of wall-clock time. The numbers below are placeholders:
# `latency-budget init --from traces.jsonl --force` drafts them from a recording of your
# app. Check the file with `latency-budget validate budgets.yaml`; every key is
# described in docs/budget-file.md.
version: 1

# The whole request: from the start of its local root span (your HTTP handler, or an
# agent's run) to its end.
total_ms: 5000

# From the start of the request to the first token of a streamed answer.
first_token_ms: 1500

# `error` fails `latency-budget check` (exit 1); `warn` is reported but passes.
severity: error

stages:
  # The built-in stages recognise GenAI semantic-convention spans and those of the
  # common instrumentations (OpenInference, OpenLLMetry, Logfire, ...) on their own.
  retrieval:
    budget_ms: 500
  model_call:
    budget_ms: 3000
    first_token_ms: 1000   # each call's time to first token, where it streams
  tool_calls:
    budget_ms: 1000
    # A stage's `match` adds rules to the built-in ones, for spans of your own:
    # match:
    #   - name: "kb.lookup"
    #   - attributes: {component.type: tool}
    # `builtin: false` beside it keeps only your rules.

# Other budgets for other requests: the first profile whose `when` matches the root span.
# profiles:
#   - name: enterprise
#     when: {attributes: {customer.tier: enterprise}}
#     total_ms: 8000
"""


def register(commands: Any) -> None:
    """Add the ``init`` subcommand."""
    parser = commands.add_parser(
        "init",
        help="write a commented budget file to start from (or draft one from a recording)",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget init                              # budgets.yaml, to edit",
            "latency-budget init --from traces.jsonl --force  # drafted from a recording",
            "latency-budget init -o - | less",
        ),
        formatter_class=raw_help(),
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        default="budgets.yaml",
        help="where to write ('-': standard output; default: budgets.yaml)",
    )
    parser.add_argument(
        "--from",
        dest="recording",
        metavar="TRACES",
        action="append",
        help="draft the budgets from this recording (OTLP JSON lines or Jaeger JSON; repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the starter file, or the one drafted from ``--from``."""
    to_stdout = args.output == "-"
    if not to_stdout and not args.force and os.path.lexists(args.output):
        raise CliError(f"{args.output} exists; --force overwrites it, -o FILE writes elsewhere")
    text = _drafted(args.recording) if args.recording else STARTER
    try:
        load_budgets(text=text, source="<init>")
    except BudgetConfigError as exc:  # a bug of ours
        raise CliError(f"internal error: init wrote an invalid budget file: {exc}", EXIT_INTERNAL) from None
    if to_stdout:
        emit(text, end="")
        return 0
    write_file(args.output, text)
    wrote(args.output)
    shown = terminal_text(args.output)
    print(
        f"Next: edit {shown}, record your app's traces (docs/cli.md, 'Record your traces'), then\n"
        f"  latency-budget check traces.jsonl -b {shown}",
        file=sys.stderr,
    )
    return 0


def _drafted(paths: list[str]) -> str:
    """``suggest``'s draft for the recordings, with the defaults of ``suggest`` (p95 x 1.2, the built-in stages)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_trace_arguments(parser)
    add_budgets_argument(parser, required=False)
    recorded = load_recorded(parser.parse_args(["--", *paths]), levers=False)
    return draft(recorded, None, 95.0, 1.2)
