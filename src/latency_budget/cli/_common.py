"""What every subcommand shares."""

from __future__ import annotations

import argparse
import textwrap
import urllib.parse
from collections.abc import Callable

from latency_budget._config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget._encode import visible

__all__ = [
    "EXIT_CODES",
    "EXIT_INTERNAL",
    "EXIT_STATUS",
    "CliError",
    "Subparsers",
    "example_epilog",
    "exit_status",
    "http_url",
    "load_budgets_option",
    "raw_help",
    "service_name",
]

MAX_SERVICE_NAME = 255  # characters; OpenTelemetry sets no limit, Jaeger and Prometheus labels read this much

EXIT_INTERNAL = 3
EXIT_STATUS = """\
exit status:
  0  success (check: every error-level check passes)
  1  a budget failed (check: an error-level check fails; validate: the budget file is invalid;
     doctor: it found something the budget file misses)
  2  unusable input: bad options, an unreadable or malformed file, an unreachable Jaeger or Collector
  3  internal error (please report it)
  4  the output could not be written (a full disk, a file that cannot be created);
     a closed standard output (| head) is not an error"""

# What each exit code means, per command: one table, which every command's --help and docs/cli.md show.
# A command not named under a code does not exit with it.
EXIT_CODES: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = (
    (
        0,
        (("* -check -serve", "success"), ("check", "every error-level check passes"), ("serve", "drained and stopped")),
    ),
    (
        1,
        (
            ("check", "an error-level check fails"),
            ("validate", "the budget file is invalid"),
            ("doctor", "it found something the budget file misses"),
            ("compare", "a --max-regression or --max-quality-drop limit is broken"),
        ),
    ),
    (
        2,
        (
            ("*", "unusable input: a bad option, an unreadable, malformed or oversized file"),
            ("check report compare suggest doctor init", "a trace format it does not read, an unreachable Jaeger"),
            ("check", "no --budgets for a recording other than the demo's"),
            ("init", "the output file exists (--force overwrites it)"),
            ("demo", "an unreachable Collector (spans not exported)"),
            ("serve", "an address in use, a budget file that cannot be loaded"),
        ),
    ),
    (3, (("*", "internal error (please report it)"),)),
    (4, (("* -serve", "the output could not be written (a full disk, a file that cannot be created)"),)),
    (130, (("* -serve", "interrupted (Ctrl-C)"),)),
)


def exit_status(command: str) -> str:
    """The ``exit status:`` block of ``command``'s --help, from :data:`EXIT_CODES`."""
    lines = ["exit status:"]
    for code, meanings in EXIT_CODES:
        applies = [text for who, text in meanings if _names(who, command)]
        if applies:
            lines.append(
                textwrap.fill("; ".join(applies), 96, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
            )
    return "\n".join(lines)


def _names(who: str, command: str) -> bool:
    words = who.split()
    if f"-{command}" in words:
        return False
    return "*" in words or command in words


Subparsers = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A user error: printed as one line (or one per problem of a budget file), exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2, *, lines: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.lines = lines or (message,)

    @classmethod
    def from_budgets(cls, exc: BudgetConfigError, exit_code: int = 2) -> CliError:
        """A budget file's problems, one line each (each names file, line and key)."""
        return cls(str(exc.problems[0]), exit_code, lines=exc.lines)


def example_epilog(*examples: str) -> str:
    """An ``Examples:`` block for a subcommand's ``--help``."""
    return "examples:\n" + "\n".join(f"  {example}" for example in examples)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions wrapped to the terminal, paragraph by paragraph; indented lines and the epilog as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(("examples:", "exit status:")):
            return super()._fill_text(text, width, indent)  # the epilog: example commands as written
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if paragraph.startswith(" "):
                paragraphs.append(super()._fill_text(paragraph, width, indent))
            else:
                paragraphs.append(
                    textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n\n".join(paragraphs)


def raw_help() -> type[argparse.HelpFormatter]:
    """The help formatter: descriptions wrapped to the terminal, example lines as written."""
    return _HelpFormatter


def load_budgets_option(
    path: str | None, builtin: Callable[[], BudgetConfig], builtin_label: str
) -> tuple[BudgetConfig, str]:
    """The ``--budgets`` file (a bad one is a one-line error, exit 2), else ``builtin()``; with a label for people."""
    if path is None:
        return builtin(), builtin_label
    try:
        return load_budgets(path), path
    except BudgetConfigError as exc:
        raise CliError.from_budgets(exc) from None


def service_name(text: str) -> str:
    """An argparse type: a service name that can be searched, labelled and pasted (visible characters only)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a service name, got an empty one")
    if not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"a service name cannot hold control, line-break or bidi characters, got {visible(text)!r}"
        )
    if len(text) > MAX_SERVICE_NAME:
        raise argparse.ArgumentTypeError(f"a service name has at most {MAX_SERVICE_NAME} characters, got {len(text)}")
    return text


def http_url(text: str) -> str:
    """An argparse type: an http or https URL with a host, of visible characters and no spaces."""
    parsed = urllib.parse.urlsplit(text) if text.isprintable() and " " not in text else None
    if parsed is None or parsed.scheme.lower() not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http or https URL such as http://localhost:16686, got {visible(text)!r}"
        )
    return text
