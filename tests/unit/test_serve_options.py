"""``serve``'s option table is the one source: docs/collector-tier.md, ServeOptions and the Helm chart agree with it.

The docs table between the two markers is :func:`render_doc_table`; after a change to
``OPTIONS``, regenerate it with ``python -m tests.unit.test_serve_options``.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from latency_budget._serve.assembly import Limits
from latency_budget._serve.options import OPTIONS, option, render_doc_table
from latency_budget._serve.server import ServeOptions
from latency_budget._serve.wal import FSYNC_POLICIES, WalOptions
from latency_budget.cli._common import CliError
from latency_budget.cli._serve import _values

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "collector-tier.md"
CHART = ROOT / "deploy" / "helm" / "latency-budget"
BEGIN = "<!-- serve options: generated from OPTIONS by tests/unit/test_serve_options.py -->"
END = "<!-- end of serve options -->"
# ServeOptions fields no option fills, each for a reason.
NOT_OPTIONS = {
    "limits.remembered_traces": "a fixed bound on decided trace ids kept for late spans",
    "wal.segment_bytes": "derived: a quarter of --wal-max-bytes and of the free space, at most 16 MiB",
}
NESTED: dict[str, Any] = {"limits": Limits, "wal": WalOptions}


def _leaves() -> dict[str, Any]:
    """Every ServeOptions field, the nested Limits and WalOptions fields as ``limits.x``, with its default."""
    leaves: dict[str, Any] = {}
    for item in dataclasses.fields(ServeOptions):
        if item.name in NESTED:
            for inner in dataclasses.fields(NESTED[item.name]):
                default = inner.default if inner.default is not dataclasses.MISSING else None
                leaves[f"{item.name}.{inner.name}"] = default
        else:
            leaves[item.name] = item.default
    return leaves


def test_the_docs_table_of_serve_options_is_the_codes_table() -> None:
    """docs/collector-tier.md's options table is the rendering of OPTIONS, row for row."""
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text, "docs/collector-tier.md lost its generated options table's first marker"
    assert END in text, "docs/collector-tier.md lost its generated options table's last marker"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == render_doc_table(), "regenerate it: python -m tests.unit.test_serve_options"


def test_every_serve_options_field_has_a_row_and_every_row_a_field() -> None:
    """Each ServeOptions field (Limits and WalOptions inside) is one row's field, and each row's field exists."""
    leaves = _leaves()
    filled = {row.field for row in OPTIONS if row.field is not None}
    assert filled <= set(leaves), f"rows name fields ServeOptions lacks: {sorted(filled - set(leaves))}"
    missing = set(leaves) - filled - set(NOT_OPTIONS)
    assert not missing, f"ServeOptions fields without an option row: {sorted(missing)}"
    assert len({row.flag for row in OPTIONS}) == len(OPTIONS), "a flag has two rows"


def test_the_dataclass_defaults_are_the_tables_defaults() -> None:
    """Where a row has a plain default, the ServeOptions (or Limits, WalOptions) field's default is the same."""
    leaves = _leaves()
    for row in OPTIONS:
        if row.field is None or row.default is None:
            continue
        assert leaves[row.field] == row.default, f"--{row.flag}: table {row.default!r}, dataclass {leaves[row.field]!r}"
    derived = option("wal-max-bytes")
    assert derived.derived_from == "max-bytes"
    assert leaves["wal.max_bytes"] == option("max-bytes").default, "WalOptions on its own follows --max-bytes too"
    assert tuple(option("wal-fsync").metavar.split("|")) == FSYNC_POLICIES


def test_every_default_is_what_its_parser_makes_of_its_text() -> None:
    """A row's default is accepted by its own parser (the docs' text is the value, not a rounded one)."""
    for row in OPTIONS:
        if row.default is None:
            continue
        assert row.parse(str(row.default)) == row.default, row.flag
        if row.default_text.replace(",", "").isdigit():
            assert float(row.default_text.replace(",", "")) == row.default, row.flag
        if row.default_text.endswith(" MiB"):
            assert int(row.default_text.removesuffix(" MiB")) * 1024 * 1024 == row.default, row.flag


def test_every_flag_the_helm_chart_passes_is_in_the_table() -> None:
    """The chart's serve arguments, and the flags its values.yaml comments name, are all rows of OPTIONS."""
    flags = {row.flag for row in OPTIONS}
    template = (CHART / "templates" / "serve-statefulset.yaml").read_text(encoding="utf-8")
    passed = set(re.findall(r"^\s*- --([a-z-]+)\s*$", template, flags=re.MULTILINE))
    assert passed, "found no --flag in the chart's serve arguments: the pattern is blind"
    assert passed <= flags, f"the chart passes options serve does not have: {sorted(passed - flags)}"
    values = (CHART / "values.yaml").read_text(encoding="utf-8")
    named = set(re.findall(r"\(--([a-z-]+)[,)]", values))
    assert named <= flags, f"values.yaml names options serve does not have: {sorted(named - flags)}"


def test_where_the_chart_differs_from_a_default_its_comment_says_so() -> None:
    """A values.yaml setting the chart passes to a flag equals the table's default, or its comment says so."""
    template = (CHART / "templates" / "serve-statefulset.yaml").read_text(encoding="utf-8")
    pairs = re.findall(r"- --([a-z-]+)\n\s*- \{\{ \$serve\.([A-Za-z.]+)", template)
    assert pairs, "found no --flag bound to a value: the pattern is blind"
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    for flag, key in pairs:
        row = option(flag)
        leaf = key.rsplit(".", 1)[-1]
        at = next(i for i, line in enumerate(lines) if re.match(rf"\s*{leaf}:", line))
        value = lines[at].split(":", 1)[1].strip()
        if value and row.parse(value) == row.default:
            continue
        comment = []
        for line in reversed(lines[:at]):
            if not line.strip().startswith("#") and not line.rstrip().endswith(":"):
                break  # the comment block above the key, or above the mapping the key is in
            comment.append(line)
        said = " ".join(comment)
        assert f"--{flag}" in said, f"values.yaml {key}: {value} differs from a default; its comment must name --{flag}"
        assert "default" in said, f"values.yaml {key}: {value} differs from --{flag}'s default; its comment must say so"


def test_values_take_the_option_then_the_variable_then_the_default() -> None:
    """The option beats its variable, an empty variable is unset, and --wal-max-bytes follows --max-bytes."""
    args = argparse.Namespace(max_bytes="1000", decision_wait=None)
    env = {
        "LATENCY_BUDGET_SERVE_MAX_BYTES": "5",
        "LATENCY_BUDGET_SERVE_DECISION_WAIT": " ",
        "LATENCY_BUDGET_SERVE_MAX_WAIT": "7",
    }

    values = _values(args, env)

    assert (values["max-bytes"], values["wal-max-bytes"]) == (1000, 1000)
    assert (values["decision-wait"], values["max-wait"]) == (5.0, 7.0)
    assert values["budgets"] is None


def test_an_empty_or_bad_value_is_one_line_naming_its_source() -> None:
    """An empty option is an error naming the option; a bad variable is an error naming the variable."""
    with pytest.raises(CliError, match=r"^serve: --max-bytes: expected a positive whole number, got ''$"):
        _values(argparse.Namespace(max_bytes=""), {})
    with pytest.raises(CliError, match=r"^serve: LATENCY_BUDGET_SERVE_WAL_FSYNC: expected one of"):
        _values(argparse.Namespace(), {"LATENCY_BUDGET_SERVE_WAL_FSYNC": "sometimes"})


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + render_doc_table() + "\n" + END + rest.split(END, 1)[1], encoding="utf-8")
