"""A count and its noun, for people: the one place that decides ``1 request`` or ``2 requests``.

The core, the reports, the CLI, the collector tier and the testing helpers all say a count
through :func:`plural`, so no text anyone reads says "1 calls".
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, nouns: str | None = None, *, grouped: bool = False) -> str:
    """``1 request``, ``2 requests``; ``nouns`` where adding an s is wrong (``plural(n, "query", "queries")``).

    ``grouped`` writes the count with thousands separators: ``100,000 spans``.
    """
    shown = f"{count:,}" if grouped else str(count)
    return f"{shown} {noun if count == 1 else nouns or noun + 's'}"
