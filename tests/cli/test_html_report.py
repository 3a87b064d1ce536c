"""``report --html``: one self-contained page, rendered by a real headless Chromium.

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``). Without
it these tests are skipped, except under ``CI=true``, where a missing browser fails them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ..ci import skip_or_fail_in_ci
from .conftest import BUDGETS, OTLP, REPO, expected_reports, run_cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def browser() -> str:
    """The headless browser binary (skipped when absent, a failure under CI=true)."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    skip_or_fail_in_ci("no Chromium found (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML report of the OTLP fixture, judged with its budget file."""
    path = tmp_path_factory.mktemp("html") / "report.html"
    result = run_cli("report", OTLP, "--budgets", BUDGETS, "--html", path)
    assert result.returncode == 0, result.stderr
    assert f"Wrote {path}." in result.stderr
    return path


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory, demo_traces: Path) -> Path:
    """The HTML report of the demo's saved traces (two chat models, every lever), judged with the example budgets."""
    path = tmp_path_factory.mktemp("html-demo") / "report.html"
    result = run_cli("report", demo_traces, "--budgets", REPO / "budgets.example.yaml", "--html", path)
    assert result.returncode == 0, result.stderr
    return path


def _render(browser: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Load ``path`` in headless Chromium; stdout is the DOM after rendering, stderr the browser log."""
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # tests may run as root in a container
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            *extra,
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _console_messages(log: str) -> list[str]:
    """The page's console messages (CSP violations, failed loads, script errors) in Chromium's log."""
    return [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


class _Elements(HTMLParser):
    """Counts elements by ``tag.class`` and keeps every src/href value."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.counts[tag] += 1
        for css in (values.get("class") or "").split():
            self.counts[f"{tag}.{css}"] += 1
        self.links += [value for key, value in attrs if key in ("src", "href") and value]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


@pytest.mark.parametrize("which", ["page", "demo_page"])
def test_page_is_self_contained(which: str, request: pytest.FixtureRequest) -> None:
    """No external src or href, no script, and a CSP that would block any network load."""
    html = request.getfixturevalue(which).read_text(encoding="utf-8")
    elements = _parse(html)
    assert elements.links == []
    assert elements.counts["script"] == 0
    assert "default-src 'none'" in html
    assert not re.search(r"url\(\s*['\"]?https?:", html)


def test_page_renders_every_stage_and_the_slowest_request_without_console_errors(browser: str, page: Path) -> None:
    """Chromium renders one histogram card per measured stage and a waterfall with over-budget spans, silently."""
    result = _render(browser, page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    dom = _parse(result.stdout)
    # Two profiles in the fixture, each with five stages and the end-to-end total.
    assert dom.counts["section.stage-card"] == 12
    assert dom.counts["svg.histogram"] == 12
    assert dom.counts["line.budget"] == 12
    assert dom.counts["rect.over"] > 0
    assert dom.counts["rect.ok"] > 0
    slowest = max(expected_reports(), key=lambda r: r["total_actual_ms"])
    assert f'data-trace-id="{slowest["trace_id"]}"' in result.stdout
    over_rows = dom.counts["div.over"]  # the rows of spans in over-budget stages
    assert over_rows >= 1
    assert slowest["over_budget_stages"] == ["model_call"]
    chat_rows = re.findall(r'<div class="wf-row over" data-stage="(\w+)"', result.stdout)
    assert set(chat_rows) == {"model_call"}
    assert "Latency budget report" in "".join(dom.text)


def test_page_renders_where_to_win_the_model_charts_and_the_context_fits(browser: str, demo_page: Path) -> None:
    """Chromium renders a row per lever, a model chart per stage and a scatter per model, with fit lines, silently."""
    result = _render(browser, demo_page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    dom = _parse(result.stdout)
    levers = set(re.findall(r'<tr data-lever="(\w+)">', result.stdout))
    assert levers == {
        "streaming",
        "cache",
        "model_choice",
        "context_size",
        "output_length",
        "sequential_calls",
        "iterations",
    }
    # Model charts: retrieval (one embedding model) and model_call (gpt-4o and gpt-4o-mini).
    assert dom.counts["svg.models"] == 2
    assert dom.counts["rect.p50"] == 3
    assert dom.counts["line.p95"] == dom.counts["line.p99"] == 3
    assert dom.counts["circle.ttft"] == 2  # the chat models stream some calls; embeddings never do
    labels = re.findall(r'<text class="model"[^>]*>([^<]+)</text>', result.stdout)
    assert sorted(labels) == ["gpt-4o (n 50)", "gpt-4o-mini (n 278)", "text-embedding-3-small (n 200)"]
    # Context size: one card per model; a duration plot each, a first-token plot for the chat models.
    assert dom.counts["section.context-card"] == 3
    assert dom.counts["svg.context"] == 5
    assert dom.counts["circle.pt"] > 100
    assert dom.counts["circle.pt-ft"] > 50
    assert dom.counts["line.fit-ft"] == 2  # both chat models: time to first token grows with the context
    cards = re.findall(
        r'<section class="chart-card context-card" data-stage="(\w+)" data-model="([\w.-]+)">', result.stdout
    )
    assert sorted(cards) == [
        ("model_call", "gpt-4o"),
        ("model_call", "gpt-4o-mini"),
        ("retrieval", "text-embedding-3-small"),
    ]
    text = "".join(dom.text)
    assert "no fit (no significant growth with size)" in text  # embeddings: said, not drawn
    assert re.search(r"first token: [\d.]+ms per 1,000 tokens \(95% CI [\d.]+ms to [\d.]+ms\), R² 0\.\d\d, n \d+", text)


def test_screenshot_of_the_lever_sections_renders(browser: str, demo_page: Path, tmp_path: Path) -> None:
    """The demo's page, with its lever sections, comes out as a non-trivial full-page PNG."""
    shot = tmp_path / "levers.png"
    result = _render(browser, demo_page, f"--screenshot={shot}", "--window-size=1280,4200", "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 100_000


def test_console_check_catches_a_page_that_loads_from_the_network(browser: str, tmp_path: Path) -> None:
    """The console check is not blind: the same policy on a page with a remote image logs a violation."""
    bad = tmp_path / "bad.html"
    html = (
        '<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        '<img src="https://example.invalid/logo.png"><p>x</p>'
    )
    bad.write_text(html, encoding="utf-8")
    result = _render(browser, bad, "--dump-dom")
    assert any("example.invalid" in line for line in _console_messages(result.stderr))


def test_screenshot_renders(browser: str, page: Path, tmp_path: Path) -> None:
    """A full-page screenshot comes out as a non-trivial PNG (for people to look at when it changes)."""
    shot = tmp_path / "report.png"
    result = _render(browser, page, f"--screenshot={shot}", "--window-size=1280,2400", "--hide-scrollbars")
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000
