"""benchmarks/README.md's scaling tables are what benchmarks/scaling.py writes, and docs/cli.md quotes them."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import scaling  # type: ignore[import-not-found]  # noqa: E402 - the benchmark itself

BLOCK = re.compile(
    re.escape(scaling.BEGIN) + r"`(?P<command>[^`]+)` -->\n(?P<body>.*?)" + re.escape(scaling.END), re.DOTALL
)


def _blocks() -> list[tuple[str, str]]:
    text = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    return [(found.group("command"), found.group("body")) for found in BLOCK.finditer(text)]


def _options(command: str) -> tuple[list[int], list[str], list[str]]:
    """The sizes, commands and workloads of a quoted scaling.py command line, as the script would run them."""
    words = shlex.split(command)
    assert words[:2] == ["python", "benchmarks/scaling.py"]
    assert words[-1] == "--write-readme"
    values: dict[str, list[str]] = {"--spans": [], "--command": [], "--workload": []}
    pairs = words[2:-1]
    for option, value in zip(pairs[::2], pairs[1::2], strict=True):
        values[option].append(value)
    sizes = [int(v) for v in values["--spans"]]
    commands = [c for c in scaling.COMMANDS if c in (values["--command"] or list(scaling.COMMANDS))]
    names = [w for w in scaling.WORKLOADS if w in (values["--workload"] or list(scaling.WORKLOADS))]
    assert scaling.command_line(sizes, commands, names) == command  # the script writes exactly this line
    return sizes, commands, names


def _rows(body: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in body.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return split[0], split[2:]


def test_the_readme_has_the_100k_table_of_every_workload_and_command() -> None:
    """The 100,000-span run of both workloads and all three commands is in the README."""
    assert "python benchmarks/scaling.py --spans 100000 --write-readme" in [command for command, _ in _blocks()]


@pytest.mark.parametrize("command", [command for command, _ in _blocks()])
def test_each_scaling_block_is_the_table_its_command_writes(command: str) -> None:
    """A block's columns are its command's, its rows its sizes and workloads, each ratio its CPU over the floor's."""
    body = dict(_blocks())[command]
    sizes, commands, names = _options(command)
    assert f"One run of `{command}` at commit `" in body
    head, rows = _rows(body)
    expected_head = ["workload", "spans"]
    for name in commands:
        expected_head += [f"`{name}` CPU s", f"`{name}` peak RSS MB", f"`{name}` / floor"]
    expected_head += [f"`{scaling.FLOOR}` CPU s", f"`{scaling.FLOOR}` peak RSS MB"]
    assert head == expected_head
    assert [(row[0], row[1]) for row in rows] == [(f"`{w}`", f"{n:,}") for w in names for n in sizes]
    for row in rows:
        floor = float(row[-2])
        for n in range(len(commands)):
            cpu, ratio = float(row[2 + 3 * n]), float(row[4 + 3 * n])
            assert ratio == pytest.approx(cpu / floor, abs=0.06 + 0.01 * cpu / floor)  # from unrounded figures


def test_docs_cli_quotes_the_standard_100k_report_figures() -> None:
    """docs/cli.md's CPU and peak RSS of `report`, and CPU of `suggest`, on 100,000 standard spans are the table's."""
    body = dict(_blocks())["python benchmarks/scaling.py --spans 100000 --write-readme"]
    head, rows = _rows(body)
    row = next(row for row in rows if row[:2] == ["`standard`", "100,000"])
    cpu, rss = row[head.index("`report` CPU s")], row[head.index("`report` peak RSS MB")]
    docs = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    quoted = re.search(
        r"`report --format json` took \*\*([\d.]+) s\*\* of CPU and \*\*([\d,]+) MB\*\* at its peak", docs
    )
    assert quoted is not None
    assert quoted.groups() == (cpu, rss)
    suggest = re.search(r"`suggest`, which reads and judges the same but estimates no levers, \*\*([\d.]+) s\*\*", docs)
    assert suggest is not None
    assert suggest.group(1) == row[head.index("`suggest` CPU s")]


MILLION = "python benchmarks/scaling.py --spans 1000000 --write-readme"


def test_docs_cli_quotes_the_million_span_run() -> None:
    """docs/cli.md's CPU and peak RSS of `report` and `suggest` on a million standard spans are the table's."""
    head, rows = _rows(dict(_blocks())[MILLION])
    row = next(row for row in rows if row[:2] == ["`standard`", "1,000,000"])
    docs = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    quoted = re.search(
        r"On a million spans of the standard trace, `report` took \*\*([\d.]+) s\*\* of CPU and \*\*([\d,]+) MB\*\*, "
        r"`suggest` \*\*([\d.]+) s\*\* and \*\*([\d,]+) MB\*\*",
        docs,
    )
    assert quoted is not None
    assert quoted.groups() == tuple(
        row[head.index(column)]
        for column in ("`report` CPU s", "`report` peak RSS MB", "`suggest` CPU s", "`suggest` peak RSS MB")
    )


TEN_MILLION = "python benchmarks/scaling.py --spans 10000000 --command report --write-readme"


def test_docs_cli_quotes_the_ten_million_span_run() -> None:
    """docs/cli.md's rounded CPU and peak RSS of `report` on ten million spans of each workload are the table's."""
    head, rows = _rows(dict(_blocks())[TEN_MILLION])
    docs = " ".join((REPO / "docs" / "cli.md").read_text(encoding="utf-8").split())
    quoted = re.search(
        r"On ten million, `report` took ([\d,]+) s and ([\d,]+) MB \(standard\) and ([\d,]+) s and ([\d,]+) MB", docs
    )
    assert quoted is not None
    figures: list[str] = []
    for workload in ("`standard`", "`one-model`"):
        row = next(row for row in rows if row[0] == workload)
        figures += [
            f"{float(row[head.index('`report` CPU s')]):,.0f}",
            f"{int(row[head.index('`report` peak RSS MB')]):,}",
        ]
    assert quoted.groups() == tuple(figures)
