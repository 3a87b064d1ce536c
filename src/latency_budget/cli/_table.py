"""Plain-text and Markdown tables for terminals and CI job summaries."""

from __future__ import annotations

from collections.abc import Sequence

from latency_budget._encode import terminal_text

__all__ = ["markdown_table", "text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """Columns padded to fit, ``|`` between them and a rule under the header (the seed's table style).

    Columns whose index is in ``right`` are right-aligned, which suits numbers. Every cell is
    terminal text (``terminal_text``): a name cannot move the cursor, colour or break the line.
    """
    header = [terminal_text(str(cell)) for cell in header]
    rows = [[terminal_text(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            str(cell).rjust(width) if i in right else str(cell).ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return " | ".join(cells).rstrip()

    return "\n".join([line(header), "-+-".join("-" * width for width in widths), *(line(row) for row in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """A GitHub-flavoured Markdown table of cells that are Markdown already.

    A name goes in through ``markdown_cell``, prose through ``markdown_text``: both escape
    ``|``, so no cell can split its row.
    """

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(str(cell) for cell in row) + " |"

    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])
