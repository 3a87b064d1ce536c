"""Every subcommand's --help, the example budget file, and the progress bar."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from latency_budget._config import load_budgets
from latency_budget._demo import EXAMPLE_BUDGETS_NAME, example_budgets_text
from latency_budget.cli._progress import ProgressBar

from .conftest import REPO, run_cli

SUBCOMMANDS = ("demo", "validate", "check", "report", "suggest", "doctor", "rules")


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help_with_an_example(command: str) -> None:
    """`latency-budget COMMAND --help` exits 0 and shows at least one example invocation."""
    result = run_cli(command, "--help")
    assert result.returncode == 0
    examples = result.stdout.split("examples:\n", 1)[1]
    assert f"  latency-budget {command}" in examples


def test_top_level_help_lists_the_subcommands() -> None:
    """`latency-budget --help` names every subcommand."""
    result = run_cli("--help")
    assert result.returncode == 0
    for command in SUBCOMMANDS:
        assert f"    {command}" in result.stdout


def test_unknown_subcommand_is_one_line() -> None:
    """A mistyped subcommand is a one-line error with exit 2."""
    result = run_cli("chekc")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "invalid choice: 'chekc'" in result.stderr


def test_example_budget_file_validates() -> None:
    """budgets.example.yaml at the top of the repository passes `latency-budget validate`."""
    result = run_cli("validate", REPO / EXAMPLE_BUDGETS_NAME)
    assert result.returncode == 0, result.stderr
    assert (
        "6 stages (guardrails 200ms, cache 25ms, retrieval 350ms, model_call 3500ms, tool_calls 1200ms, "
        "validation 300ms)" in result.stdout
    )


def _without_modeline(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# yaml-language-server:"))


def test_packaged_example_is_the_repository_file() -> None:
    """The demo's built-in budgets are budgets.example.yaml (an editor schema line aside): edit both together."""
    top = (REPO / EXAMPLE_BUDGETS_NAME).read_text(encoding="utf-8")
    assert _without_modeline(example_budgets_text()) == _without_modeline(top)


def test_example_budgets_exercise_every_feature() -> None:
    """The example shows custom match rules, first-token and call budgets, a warn severity, objectives and a profile."""
    config = load_budgets(REPO / EXAMPLE_BUDGETS_NAME)
    default = config.default
    assert default.total_ms is not None
    assert default.first_token_ms is not None
    assert default.stage("model_call").first_token_ms is not None
    assert default.stage("model_call").max_calls is not None
    assert {s.severity for s in default.stages} == {"warn", "error"}
    assert [p.name for p in config.profiles] == ["voice"]
    assert config.budgets_by_profile("voice").first_token_ms != default.first_token_ms
    assert {s.objective for s in default.stages} == {0.95, 0.99}
    assert config.budgets_by_profile("voice").first_token_objective != default.first_token_objective


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_bar_appears_only_on_a_terminal_after_a_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is drawn for a quick run or on a pipe; a slow run on a terminal gets a bar that is erased at the end."""
    monkeypatch.setenv("TERM", "xterm")
    clock = _Clock()
    terminal = _Terminal()
    bar = ProgressBar(100, "simulating", stream=terminal, delay_s=0.5, interval_s=0.1, width=10, clock=clock)
    bar.update(10)
    assert terminal.getvalue() == ""  # not yet worth a bar
    clock.now = 0.6
    bar.update(50)
    assert terminal.getvalue() == "\rsimulating [#####.....] 50/100"
    clock.now = 0.65
    bar.update(60)  # too soon to redraw
    assert terminal.getvalue().count("\r") == 1
    clock.now = 0.8
    bar.update(100)
    bar.close()
    assert terminal.getvalue().endswith("\rsimulating [##########] 100/100\r\x1b[2K")

    pipe = io.StringIO()
    quiet = ProgressBar(100, "simulating", stream=pipe, delay_s=0, clock=clock)
    quiet.update(100)
    quiet.close()
    assert pipe.getvalue() == ""


def test_progress_bar_stays_off_on_a_dumb_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM=dumb (Emacs shells, some CI logs) cannot redraw a line, so no bar is drawn."""
    monkeypatch.setenv("TERM", "dumb")
    terminal = _Terminal()
    bar = ProgressBar(10, "x", stream=terminal, delay_s=0)
    bar.update(5)
    bar.close()
    assert terminal.getvalue() == ""


def test_validate_keeps_exit_1_for_a_missing_file(tmp_path: Path) -> None:
    """`validate` on a missing file keeps its documented exit code 1 (it is not one of the trace commands)."""
    result = run_cli("validate", tmp_path / "missing.yaml")
    assert result.returncode == 1
    assert "cannot read budget file" in result.stderr
