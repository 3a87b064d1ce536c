"""docs/dialects.md's table of the built-in vocabularies is the code's dialect table, row for row.

The table between the two markers is what :func:`render` makes of ``DIALECTS``; after a
change to the table, regenerate it with ``python -m tests.unit.test_dialects_doc``.
"""

from __future__ import annotations

from pathlib import Path

from latency_budget._config.genai_defaults import DIALECTS, Dialect

DOC = Path(__file__).resolve().parents[2] / "docs" / "dialects.md"
BEGIN = "<!-- vocabularies: generated from DIALECTS by tests/unit/test_dialects_doc.py -->"
END = "<!-- end of vocabularies -->"


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def _stages(dialect: Dialect) -> str:
    if dialect.routes:
        return "by URL: the routes of " + ", ".join(api.source for api in dialect.routes if api.hosts)
    parts = [f"{stage}: " + ", ".join(f"`{value}`" for value in values) for stage, values in dialect.stages.items()]
    parts += [f"{stage}: names ending " + ", ".join(f"`{e}`" for e in ends) for stage, ends in dialect.endings.items()]
    if dialect.not_stages:
        parts.append("no stage: " + ", ".join(f"`{value}`" for value in dialect.not_stages))
    return "; ".join(parts)


def render() -> str:
    """The table of every row of ``DIALECTS``: who writes the key, the key, its stages, its evidence."""
    lines = [
        "| vocabulary | key | values and their stages | evidence class | evidence |",
        "| --- | --- | --- | --- | --- |",
    ]
    for dialect in DIALECTS:
        evidence = "tested for real" if dialect.evidence == "tested" else "read from source"
        cells = (dialect.source, f"`{dialect.key}`", _stages(dialect), dialect.evidence_class, evidence)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def test_the_docs_table_of_vocabularies_is_the_codes_table() -> None:
    """docs/dialects.md lists exactly the rows of DIALECTS, each with its key, stages and evidence class."""
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text, "docs/dialects.md lost its generated table's first marker"
    assert END in text, "docs/dialects.md lost its generated table's last marker"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == render(), "regenerate it: python -m tests.unit.test_dialects_doc"


def test_every_vocabulary_has_a_row_and_the_renderer_is_not_blind() -> None:
    """Each dialect's source and key appear in the rendered table; dropping a row changes it."""
    table = render()
    for dialect in DIALECTS:
        assert _cell(dialect.source) in table
        assert f"`{dialect.key}`" in table
    assert len(table.splitlines()) == len(DIALECTS) + 2


if __name__ == "__main__":
    print(render())
