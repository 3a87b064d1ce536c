"""``report --html``: one self-contained page, rendered by a real headless Chromium.

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``). Without
it these tests are skipped, except under ``CI=true``, where a missing browser fails them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ..ci import skip_or_fail_in_ci
from ..unit.test_lever_quality_traffic import html_page, two_models
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
    # Two profiles in the fixture, each with five stages and the end-to-end total; a histogram per
    # timed row of the text report (duration, first token), each with its budget line.
    rows = json.loads(run_cli("report", OTLP, "--budgets", BUDGETS, "--format", "json").stdout)["rows"]
    timed = [r for r in rows if r["metric"] in ("duration", "first_token") and r["count"]]
    assert dom.counts["section.stage-card"] == 12
    assert dom.counts["svg.histogram"] == len(timed) > 12
    assert dom.counts["line.budget"] == sum(1 for r in timed if r["budget"] is not None)
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


def _metric_blocks(html: str, stage: str) -> dict[str, int]:
    """The ``over`` figure of each budget block (duration, first token, calls) in ``stage``'s first card."""
    card = re.search(rf'<section class="stage-card[^"]*" data-stage="{stage}">(.*?)</section>', html, re.S)
    assert card is not None, f"no card for {stage}"
    return {m: int(n) for m, n in re.findall(r'data-metric="(\w+)" data-over="(\d+)"', card.group(1))}


def test_first_token_has_its_own_histogram_and_count_on_every_card_that_has_one(tmp_path: Path) -> None:
    """Each stage and the end to end show first token against its budget, counted as the text report counts it."""
    budgets = tmp_path / "budgets.yaml"
    # Only the request-level first token can break: everything else is out of reach.
    budgets.write_text(
        BUDGETS.read_text(encoding="utf-8").replace("first_token_ms: 3500", "first_token_ms: 1500"), encoding="utf-8"
    )
    page = tmp_path / "report.html"
    assert run_cli("report", OTLP, "--budgets", budgets, "--html", page).returncode == 0
    data = run_cli("report", OTLP, "--budgets", budgets, "--format", "json")
    rows = json.loads(data.stdout)["rows"]
    html = page.read_text(encoding="utf-8")
    profile = rows[0]["profile"]
    first_token = next(
        r for r in rows if r["profile"] == profile and r["stage"] == "total" and r["metric"] == "first_token"
    )
    assert first_token["over_budget"] > 0, "the planted budget must break"
    blocks = _metric_blocks(html, "total")
    assert blocks["first_token"] == first_token["over_budget"]
    card = re.search(
        r'<section class="stage-card( over)?" data-stage="total">.*?<small class="rate">([^<]*)</small>', html, re.S
    )
    assert card is not None
    assert card.group(1) == " over"
    broke = int(re.match(r"over budget in (\d+) of", card.group(2)).group(1))  # type: ignore[union-attr]
    assert broke >= first_token["over_budget"]


def test_the_waterfall_names_a_first_token_breach(tmp_path: Path) -> None:
    """A request over only its first-token budget is shown as a first-token breach, not as 'total' or 'nothing'."""
    budgets = tmp_path / "budgets.yaml"
    text = BUDGETS.read_text(encoding="utf-8").replace("first_token_ms: 3500", "first_token_ms: 1")
    text = re.sub(r"(?m)^total_ms: \d+", "total_ms: 600000", text)
    text = re.sub(r"(?m)^(\s+budget_ms:) \d+", r"\1 600000", text)
    budgets.write_text(text, encoding="utf-8")
    page = tmp_path / "report.html"
    assert run_cli("report", OTLP, "--budgets", budgets, "--html", page).returncode == 0
    html = page.read_text(encoding="utf-8")
    waterfall = html[html.index('id="waterfall"') :]
    header = re.search(r'<p class="sub">(.*?)</p>', waterfall, re.S)
    assert header is not None
    assert "OVER BUDGET: first token +" in header.group(1)
    assert re.search(r'<tr class="over" data-kind="first_token"><td>first token</td>', waterfall)
    assert re.search(r'<tr class="" data-kind="total"><td>total</td>', waterfall)


def test_the_latency_quality_chart_renders_with_its_front(browser: str, tmp_path: Path) -> None:
    """Evaluated traffic, the faster model worse: Chromium draws both models on the front, joined, silently."""
    page = tmp_path / "quality.html"
    page.write_text(html_page(two_models((0.48, 0.68)), tmp_path), encoding="utf-8")
    result = _render(browser, page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    dom = _parse(result.stdout)
    assert dom.counts["svg.quality"] == 1
    assert dom.counts["circle.q-front"] == 2
    assert dom.counts["polyline.front"] == 1
