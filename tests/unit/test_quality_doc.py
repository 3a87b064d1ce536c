"""docs/dialects.md's table of answer-quality spellings is the code's ``QUALITY_SPELLINGS``, row for row.

The table between the two markers is what :func:`render` makes of it; after a change to
the table, regenerate it with ``python -m tests.unit.test_quality_doc``.
"""

from __future__ import annotations

from pathlib import Path

from latency_budget._config.genai_defaults import (
    QUALITY_SPELLINGS,
    EvaluationSpelling,
    FinishSpelling,
    GuardrailSpelling,
    QualitySpelling,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "dialects.md"
BEGIN = "<!-- quality: generated from QUALITY_SPELLINGS by tests/unit/test_quality_doc.py -->"
END = "<!-- end of quality -->"


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def _codes(values: tuple[str, ...]) -> str:
    return ", ".join(f"`{value}`" for value in values)


def _what(spelling: QualitySpelling) -> tuple[str, str]:
    """(what it says, where it is read) of one spelling."""
    if isinstance(spelling, EvaluationSpelling):
        keys = [f"name `{spelling.name_key}`", f"score `{spelling.score_key}`"]
        if spelling.label_key:
            keys.append(f"label `{spelling.label_key}`")
        if spelling.response_id_key:
            keys.append(f"answer `{spelling.response_id_key}`")
        if spelling.error_key:
            keys.append(f"failed evaluation `{spelling.error_key}`")
        return "evaluation result", f"event `{spelling.event}` (span event or log record): " + ", ".join(keys)
    if isinstance(spelling, GuardrailSpelling):
        where = f"`{spelling.key}`: flagged {_codes(spelling.flagged)}; passed {_codes(spelling.passed)}"
        if spelling.target_key:
            where += f"; an answer only where `{spelling.target_key}` is absent or {_codes(spelling.answer_targets)}"
        return "guardrail decision", where
    parts = []
    if spelling.cut:
        parts.append(f"cut: {_codes(spelling.cut)}")
    if spelling.refused:
        parts.append(f"refused: {_codes(spelling.refused)}")
    return "finish reason", "; ".join(parts)


def render() -> str:
    """The table of every row of ``QUALITY_SPELLINGS``: who writes it, what it says, where, its evidence class."""
    lines = ["| who writes it | what it says | where it is read | evidence class |", "| --- | --- | --- | --- |"]
    for spelling in QUALITY_SPELLINGS:
        what, where = _what(spelling)
        cells = (spelling.source, what, where, spelling.evidence_class)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def test_the_docs_table_of_quality_spellings_is_the_codes_table() -> None:
    """docs/dialects.md lists exactly the rows of QUALITY_SPELLINGS, each with its keys and evidence class."""
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text, "docs/dialects.md lost its generated quality table's first marker"
    assert END in text, "docs/dialects.md lost its generated quality table's last marker"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == render(), "regenerate it: python -m tests.unit.test_quality_doc"


def test_every_spelling_has_a_row_of_its_kind() -> None:
    """Each spelling's source is in the rendered table, and each kind of spelling has a row."""
    table = render()
    for spelling in QUALITY_SPELLINGS:
        assert _cell(spelling.source) in table
    assert len(table.splitlines()) == len(QUALITY_SPELLINGS) + 2
    kinds = {type(spelling) for spelling in QUALITY_SPELLINGS}
    assert kinds == {EvaluationSpelling, GuardrailSpelling, FinishSpelling}


if __name__ == "__main__":
    print(render())
