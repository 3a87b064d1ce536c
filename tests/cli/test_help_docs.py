"""One CLI grammar: every subcommand's --help against docs/cli.md, -b for budget files, one set of format names."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from latency_budget.cli._common import EXIT_CODES, exit_status
from latency_budget.cli._main import build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs"
CLI_DOC = (DOCS / "cli.md").read_text(encoding="utf-8")
WIDTH = 100
READS_BUDGETS = ("demo", "check", "report", "suggest", "doctor", "rules", "serve")
FORMATS = {"table", "json", "markdown"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


COMMANDS = _commands()


def _section(name: str) -> str:
    """The text of docs/cli.md about ``name``: its section, and the pages that section links to."""
    found = re.search(rf"^## `latency-budget {name}`.*?(?=^## |\Z)", CLI_DOC, re.MULTILINE | re.DOTALL)
    if found is None:  # some commands share a section ("report and suggest", "validate and schema")
        found = re.search(rf"^## .*`latency-budget {name}`.*?(?=^## |\Z)", CLI_DOC, re.MULTILINE | re.DOTALL)
    assert found is not None, f"docs/cli.md has no section on latency-budget {name}"
    text = found.group()
    for page in set(re.findall(r"\]\(([a-z-]+\.md)", text)):
        text += (DOCS / page).read_text(encoding="utf-8")
    return text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_is_wrapped_and_lists_the_command_s_exit_codes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--help fits in 100 columns, examples included, and ends with this command's exit codes."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    text = _commands()[name].format_help()
    assert [line for line in text.splitlines() if len(line) > WIDTH] == []
    assert text.rstrip().endswith(exit_status(name))
    codes = [int(line.split()[0]) for line in exit_status(name).splitlines()[1:] if line[2:3].isdigit()]
    assert codes[0] == 0
    assert 3 in codes


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_of_every_command_is_in_docs_cli(name: str) -> None:
    """Each long option of each subcommand is named in its section of docs/cli.md (or a page it links to)."""
    section = _section(name)
    options = {o for a in COMMANDS[name]._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    assert sorted(o for o in options if o not in section) == []


def test_docs_cli_lists_every_exit_code() -> None:
    """The exit-code table of docs/cli.md has a row for each code of EXIT_CODES."""
    for code, _ in EXIT_CODES:
        assert f"\n| {code} |" in CLI_DOC


@pytest.mark.parametrize("name", READS_BUDGETS)
def test_commands_that_read_a_budget_file_take_b_and_budgets(name: str) -> None:
    """-b and --budgets on every command that reads a budget file, one option."""
    options = [set(a.option_strings) for a in COMMANDS[name]._actions]
    assert {"-b", "--budgets"} in options


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_one_set_of_format_names(name: str) -> None:
    """--format offers table, json and markdown, all three, wherever it exists."""
    for action in COMMANDS[name]._actions:
        if "--format" in action.option_strings:
            assert set(action.choices or ()) == FORMATS
