"""The README and the docs link only to files and headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings (outside code blocks), and its explicit ``<a id>`` anchors."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading and not in_code:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
        found.update(re.findall(r'<a id="([^"]+)"></a>', line))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    """Each link that is not a URL names an existing file and, for a markdown page, an existing heading."""
    broken = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for href in LINK.findall(line):
            if re.match(r"^[a-z]+:", href):
                continue
            path, _, fragment = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not path and not fragment:
                broken.append(f"{number}: {href} (links nowhere)")
            elif not target.exists():
                broken.append(f"{number}: {href} (no such file)")
            elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
                broken.append(f"{number}: {href} (no such heading)")
    assert broken == []


def test_the_readme_links_every_page_of_the_docs() -> None:
    """Every page in docs/ is reachable from the README."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {href.partition("#")[0] for href in LINK.findall(readme)}
    assert {f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")} <= linked
