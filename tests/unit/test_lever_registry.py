"""One module per lever behind one interface, in one table: every consumer reads every member of it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import get_args

import pytest

from latency_budget import load_budgets
from latency_budget._core import hints
from latency_budget._core.kinds import HINT_KINDS, KINDS, HintKind
from latency_budget._core.levers import LEVERS, Evidence, Lever
from latency_budget._core.levers.table import REQUEST_FINDERS, STAGE_FINDERS
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.cli._charts import where_section
from latency_budget.cli._levers import analyse_levers

from .helpers import pipeline
from .test_lever_hints import Requests
from .test_lever_kinds import LIMITED, SCENARIOS

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_table_is_the_kinds_and_each_row_comes_from_its_own_module() -> None:
    """LEVERS is KINDS, in HintKind's order; each row is the LEVER of the module named after it."""
    assert KINDS is LEVERS
    assert tuple(LEVERS) == HINT_KINDS == get_args(HintKind)
    for name, lever in LEVERS.items():
        module = importlib.import_module(f"latency_budget._core.levers.{name}")
        assert module.LEVER is lever
        assert isinstance(lever, Lever)


@pytest.mark.parametrize("kind", HINT_KINDS)
def test_each_lever_says_what_it_changes_fits_controls_for_needs_and_never_proposes(kind: HintKind) -> None:
    """Every row has its words for people and names the quality evidence it needs, from the Evidence list."""
    lever = LEVERS[kind]
    assert all((lever.fits, lever.controls_for, lever.evidence, lever.never))
    assert lever.never.startswith(("caching", "swapping", "trimming", "shortening", "streaming", "running", "skipping"))
    assert lever.needs
    assert set(lever.needs) <= set(get_args(Evidence))


def test_no_two_levers_change_a_stage_the_same_way() -> None:
    """What a lever does to a stage's work (the protected-stage rule reads it) is its own."""
    changes = [lever.changes for lever in LEVERS.values()]
    assert len(set(changes)) == len(changes)


def test_the_processor_runs_every_lever_of_the_table() -> None:
    """The estimated levers' finders are the processor's; the two read from the shape are find_hints' own."""
    estimated = [lever for lever in LEVERS.values() if lever.estimated]
    finders = {lever.find_in_request or lever.find_in_stage for lever in estimated}
    assert finders == set(REQUEST_FINDERS) | {find for find, _, _ in STAGE_FINDERS}
    shape = [name for name, lever in LEVERS.items() if not lever.estimated]
    for name in shape:
        assert getattr(hints, name) is importlib.import_module(f"latency_budget._core.levers.{name}")


@pytest.mark.parametrize("kind", HINT_KINDS)
def test_the_html_page_shows_every_lever_with_the_tables_words(kind: HintKind) -> None:
    """The page's Where to win row of each lever names it, with what it controls for and never proposes, from LEVERS."""
    r = Requests()
    r.p = pipeline(LIMITED)
    SCENARIOS[kind](r)
    replayed = evaluate_spans(load_budgets(text=LIMITED), [record_of(span) for span in r.p.finished()])
    page = where_section(analyse_levers(replayed))
    row = re.search(rf'<tr data-lever="{kind}"><td title="([^"]*)">{kind}</td>', page)
    assert row is not None
    words = row.group(1).replace("&#x27;", "'")
    assert LEVERS[kind].controls_for in words
    assert LEVERS[kind].never in words


def _readme_levers() -> str:
    """The README's levers section, up to the next heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Where to win: the latency levers\n", 1)[1]
    return section.split("\n## ", 1)[0]


@pytest.mark.parametrize("kind", HINT_KINDS)
def test_the_readme_states_each_levers_words(kind: HintKind) -> None:
    """The README's levers section has a row per lever: what it fits, controls for, needs and never proposes."""
    lever = LEVERS[kind]
    row = f"| `{kind}` | {lever.fits} | {lever.controls_for} | {lever.evidence} | {lever.never} |"
    assert row in _readme_levers()


def test_the_readme_table_has_no_row_beyond_the_levers() -> None:
    """The table is the levers, in the table's order, and nothing else: written from LEVERS, not twice."""
    rows = [line for line in _readme_levers().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(LEVERS)
