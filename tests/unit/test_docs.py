"""The README and the docs link only to files and headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from latency_budget._core.annotate import verdict_text
from latency_budget._demo import example_budgets, run_demo

REPO = Path(__file__).resolve().parents[2]
PAGES = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]
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


def test_the_jaeger_walkthrough_quotes_the_demo_run_it_describes() -> None:
    """docs/jaeger.md's figures (violating requests, the trace it follows and what it shows) are `demo --seed 7`'s."""
    page = " ".join((REPO / "docs" / "jaeger.md").read_text(encoding="utf-8").split())
    run = run_demo(example_budgets(), seed=7)  # what `latency-budget demo` (and docker compose's demo) runs
    judged = [report for _, report in run.judged()]
    violated = sum(report.violated for report in judged)
    followed = re.search(r"request (\d+) of the run .*? paste its id `([0-9a-f]{32})`", page)
    assert followed is not None
    number, trace_id = int(followed.group(1)), int(followed.group(2), 16)
    report = judged[number - 1]
    quoted = re.search(r"`latency_budget\.verdict = (.*?) \.\.\.`", page)
    first_hint = report.hints[0]

    assert f"match ({violated} of the {len(judged)}," in page
    assert "Jaeger lists at most 20 traces per search: raise **Limit Results**" in page
    assert report.trace_id == trace_id
    assert quoted is not None
    assert verdict_text(report).startswith(quoted.group(1))
    assert f"shown as a list: {', '.join(f'`{s}`' for s in report.broken_stages('error'))})" in page
    assert f"(`{report.total_actual_ms / 1000:.2f}s` on this trace" in page
    assert f"its {len(report.violations)} violations, then its hints" in page
    assert first_hint.kind == "sequential_calls"  # read from the trace's shape: the same in every run
    assert f"on the first `{first_hint.kind}` hint, {', '.join(f'`{n}`' for n in first_hint.span_names)})" in page
    assert f"{len(first_hint.span_ids) + 1} matches for {len(first_hint.span_ids)} spans" in page


# The README's performance bullets: the quoted phrase, then the case whose ratio it quotes.
QUOTED_RATIOS = {
    "1 root, 3 stage and 6 unmatched spans): **": "standard",
    "a web request of 20 spans that no stage matches: **": "unmatched",
    "not a request under a `requests` rule: **": "unmatched-excluded",
    "that processors see (a RECORD_ONLY sampler): **": "unsampled-record",
}


def test_the_readme_quotes_the_benchmark_figures_table() -> None:
    """The README's instruction ratios are those of benchmarks/README.md's generated figures table, case by case."""
    bench = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    block = bench.split("<!-- figures: begin", 1)[1].split("<!-- figures: end -->", 1)[0]
    ratios = dict(re.findall(r"^\| `([\w@-]+)`:[^|]*\|[^|]*\|[^|]*\| ([\d.]+) \|", block, re.MULTILINE))
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    quoted = {case: re.search(re.escape(phrase) + r"([\d.]+)\*\*", readme) for phrase, case in QUOTED_RATIOS.items()}

    assert {"standard", "unmatched"} <= set(ratios)
    assert {case: found.group(1) if found else None for case, found in quoted.items()} == {
        case: ratios.get(case) for case in quoted
    }
    # The levers' share, counted apart in the same run, quoted in thousands.
    levers = re.search(r"counted apart: ([\d,]+) instructions per trace", " ".join(block.split()))
    assert levers is not None
    share = re.search(r"The levers' share of the standard case is \*\*([\d.]+) K\*\* instructions", readme)
    assert share is not None
    assert share.group(1) == f"{int(levers.group(1).replace(',', '')) / 1000:.1f}"
