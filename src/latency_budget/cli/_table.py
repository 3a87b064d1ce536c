"""Plain-text and Markdown tables for terminals and CI job summaries."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["markdown_table", "text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """Columns padded to fit, ``|`` between them and a rule under the header (the seed's table style).

    Columns whose index is in ``right`` are right-aligned, which suits numbers.
    """
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            str(cell).rjust(width) if i in right else str(cell).ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return " | ".join(cells).rstrip()

    return "\n".join([line(header), "-+-".join("-" * width for width in widths), *(line(row) for row in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """A GitHub-flavoured Markdown table; ``|`` inside cells is escaped."""

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |"

    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])
