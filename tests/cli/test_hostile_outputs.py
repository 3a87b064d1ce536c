"""Hostile names in everything the CLI writes for other programs, each read by its real consumer.

Names from recorded traces (models, providers, tools, data sources, span names), from the
command line (services, paths, URLs) and from alert labels carry payloads of every family
the project has been attacked with: Go templates, shell metacharacters, spaces, newlines,
U+2028, U+202E, astral characters, ESC/BEL sequences, forged lines, Markdown images, raw
HTML, pipes, ``javascript:`` URLs. The consumers: promtool (``check rules --lint-fatal``
and ``test rules`` with the payload in an alert's labels), a YAML parser, markdown-it-py
(CommonMark with GFM tables), headless Chromium, ``sh``, and JSON. Each is a test
dependency; under CI=true a missing one fails instead of skipping (tests/ci.py).
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import urllib.parse
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from latency_budget._encode import promql_string, terminal_text

from ..binaries import require_program
from ..ci import skip_or_fail_in_ci
from .conftest import BUDGETS, OTLP, run_cli

TEMPLATE = '{{ with query "up" }}{{ . }}{{ end }}'
STRAY = "b}}{{b"
SHELL = "x; touch pwned"
SUBSHELL = "$(touch pwned)`touch pwned`"
QUOTES = 'it\'s "quoted" \\ back'
SPACES = "a legal name with spaces"
NEWLINE = "m\nlatency-budget check: all budgets met"
LINE_SEPARATOR = "a\u2028b"
RLO = "evil\u202etxt.exe"
ASTRAL = "assistant😀"
TERMINAL = "\x1b]0;pwned\x07\x1b[31mRED"
MARKDOWN = "x | ![t](http://127.0.0.1:9/p.png) <img src=x>"
LINK = "[click](javascript:alert(1)) javascript:alert(1)"
HTML_TAGS = "<script>alert(1)</script><b>bold</b>"

# Every payload; those a command line or a file name can carry (visible characters only).
PAYLOADS = [
    TEMPLATE,
    STRAY,
    SHELL,
    SUBSHELL,
    QUOTES,
    SPACES,
    NEWLINE,
    LINE_SEPARATOR,
    RLO,
    ASTRAL,
    TERMINAL,
    MARKDOWN,
    LINK,
    HTML_TAGS,
]
VISIBLE = [p for p in PAYLOADS if p.isprintable()]
INVISIBLE = [p for p in PAYLOADS if not p.isprintable()]
FORGED = "latency-budget check: all budgets met"
RAW_DANGER = ("\x1b", "\x07", "\u2028", "\u202e")


def _ids(payloads: list[str]) -> list[str]:
    return [terminal_text(p)[:24] for p in payloads]


# -- consumers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool (Debian's prometheus package)."""
    return require_program("promtool", install="apt-get install prometheus")


@pytest.fixture(scope="module")
def browser() -> str:
    """Headless Chromium."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    skip_or_fail_in_ci("no Chromium found (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def markdown() -> Any:
    """markdown-it-py as GitHub renders a job summary: CommonMark with raw HTML allowed, and tables."""
    try:
        markdown_it = importlib.import_module("markdown_it")
    except ImportError:
        skip_or_fail_in_ci("markdown-it-py is missing (pip install markdown-it-py; it is in the test extra)")
    return markdown_it.MarkdownIt("commonmark").enable("table")


def _promtool(promtool: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


class _Tree(HTMLParser):
    """Tags, their attribute values, table rows' cell counts and the text of an HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.cells: list[int] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [value or "" for name, value in attrs if name in ("src", "href", "action", "formaction")]
        if tag == "tr":
            self.cells.append(0)
        if tag in ("td", "th") and self.cells:
            self.cells[-1] += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _tree(html: str) -> _Tree:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    return tree


# -- recorded traces carrying the payloads --------------------------------------------------------

# Each name of the fixture recording, replaced by a payload.
_RENAMED = {
    "gpt-4o-mini": NEWLINE,
    "gpt-4o-mini-2024-07-18": LINE_SEPARATOR,
    "text-embedding-3-small": MARKDOWN,
    "openai": HTML_TAGS + TERMINAL,
    "get_shipping_status": TEMPLATE,
    "create_support_ticket": SHELL,
    "search_help_center": RLO,
    "check_account_status": ASTRAL,
    "lookup_order": LINK,
    "support-kb": HTML_TAGS,
}


def _rename(value: Any) -> Any:
    if isinstance(value, dict):
        if "stringValue" in value and value["stringValue"] in _RENAMED:
            return {"stringValue": _RENAMED[value["stringValue"]]}
        return {key: _rename(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rename(item) for item in value]
    return value


@pytest.fixture(scope="module")
def hostile_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The OTLP fixture with its models, provider, tools and data source renamed to payloads, span names too."""
    path = tmp_path_factory.mktemp("hostile") / "traces.jsonl"
    lines = []
    for line in OTLP.read_text(encoding="utf-8").splitlines():
        document = _rename(json.loads(line))
        for resource in document["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for old, new in _RENAMED.items():
                        span["name"] = span["name"].replace(old, new)
        lines.append(json.dumps(document))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(*args: str | Path) -> str:
    if args[0] == "compare":  # the recording against itself: every name on both sides
        args = (args[0], args[1], *args[1:])
    result = run_cli(*args)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


# The names each command shows: report the models, providers and data sources; compare the models.
_SHOWN = {"report": (NEWLINE, HTML_TAGS + TERMINAL, MARKDOWN), "check": (NEWLINE,), "compare": (NEWLINE, MARKDOWN)}


@pytest.mark.parametrize("command", ["report", "check", "compare"])
def test_text_output_shows_every_name_escaped_on_its_line(command: str, hostile_traces: Path) -> None:
    """Table output holds no raw ESC, BEL, U+2028 or U+202E, no forged line, and the names shown escaped."""
    out = _run(command, hostile_traces, "-b", BUDGETS)
    for char in RAW_DANGER:
        assert char not in out
    assert FORGED not in out.splitlines()
    assert not any(line.startswith(FORGED) for line in out.splitlines())
    for name in _SHOWN[command]:
        assert terminal_text(name) in out


@pytest.mark.parametrize("command", ["report", "check", "compare"])
def test_markdown_renders_names_as_text_only(command: str, hostile_traces: Path, markdown: Any) -> None:
    """Rendered Markdown has no image, script, raw HTML or link from a name, and every table row keeps its cells."""
    source = _run(command, hostile_traces, "-b", BUDGETS, "--format", "markdown")
    tree = _tree(markdown.render(source))
    assert {"img", "script", "a"}.isdisjoint(tree.tags)
    assert tree.urls == []
    assert "b" not in tree.tags  # <b>bold</b> from the provider's name stayed text
    tables = _table_rows(source)
    assert all(len(row) == len(table[0]) for table in tables for row in table)
    assert sum(len(table) - 1 for table in tables) == len(tree.cells)  # every row rendered (less the rules)
    text = "".join(tree.text)
    for char in RAW_DANGER:
        assert char not in text
    if command == "compare":
        assert "x | ![t](http://127.0.0.1:9/p.png) <img src=x>" in text  # the embedding model, as it is
        assert "m\\x0alatency-budget check: all budgets met" in text
    if command == "report":
        assert "x | ![t](http://127.0.0.1:9/p.png) <img src=x>" in text  # the name, shown as it is
        assert "<script>alert(1)</script><b>bold</b>\\x1b]0;pwned" in text
        assert "m\\x0alatency-budget check: all budgets met" in text


def _table_rows(source: str) -> list[list[list[str]]]:
    """Each Markdown table of ``source`` as rows of cells, split as GFM does (on pipes not escaped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*source.splitlines(), ""]:
        if line.startswith("|"):
            cells, cell, escaped = [], "", False
            for char in line.strip()[1:-1]:
                if char == "|" and not escaped:
                    cells.append(cell)
                    cell = ""
                else:
                    cell += char
                escaped = char == "\\" and not escaped
            current.append([*cells, cell])
        elif current:
            tables.append(current)
            current = []
    assert tables, "no Markdown table found"
    return tables


@pytest.mark.parametrize("command", ["report", "check", "compare"])
def test_json_output_keeps_names_exactly_and_ascii(command: str, hostile_traces: Path) -> None:
    """--format json is ASCII (no raw control or bidi character) and reads back to the very names recorded."""
    out = _run(command, hostile_traces, "-b", BUDGETS, "--format", "json")
    assert out.isascii()
    document = json.loads(out)
    if command == "report":
        models = {row["model"] for row in document["models"]}
        assert {NEWLINE, MARKDOWN} <= models
    if command == "compare":
        assert {NEWLINE, MARKDOWN} <= {row["model"] for row in document["rows"]}


def _dom(browser: str, traces: Path, page: Path, command: str = "report") -> _Tree:
    """The ``command`` page of ``traces`` (compare: against itself) as headless Chromium builds its DOM."""
    sides = (traces, traces) if command == "compare" else (traces,)
    result = run_cli(command, *sides, "-b", BUDGETS, "--html", page)
    assert result.returncode == 0, result.stderr
    rendered = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    return _tree(rendered.stdout)


def test_html_page_renders_names_as_inert_text(hostile_traces: Path, browser: str, tmp_path: Path) -> None:
    """In Chromium's DOM, hostile names add no element and no URL to the page, and bidi overrides show escaped."""
    hostile = _dom(browser, hostile_traces, tmp_path / "hostile.html")
    plain = _dom(browser, OTLP, tmp_path / "plain.html")
    assert Counter(hostile.tags) == Counter(plain.tags)  # the same page, names aside
    assert hostile.urls == plain.urls
    text = "".join(hostile.text)
    assert "\u202e" not in text
    assert "evil\\u202etxt.exe" in text  # a tool's span name, in the slowest request's waterfall
    assert "<script>alert(1)</script><b>bold</b>" in text  # the provider's name, as text


def test_compare_page_renders_names_as_inert_text(hostile_traces: Path, browser: str, tmp_path: Path) -> None:
    """compare --html in Chromium's DOM: hostile model names add no element and no URL, and show as text."""
    hostile = _dom(browser, hostile_traces, tmp_path / "hostile.html", "compare")
    plain = _dom(browser, OTLP, tmp_path / "plain.html", "compare")
    assert Counter(hostile.tags) == Counter(plain.tags)
    assert hostile.urls == plain.urls == []
    assert plain.tags.count("polyline") >= 4  # before's outline over after's bars, per row rendered
    text = "".join(hostile.text)
    assert "\u202e" not in text
    assert "x | ![t](http://127.0.0.1:9/p.png) <img src=x>" in text  # the embedding model's row, as text


# -- rules: promtool, YAML and the pasted command -------------------------------------------------

ONE_STAGE = "version: 1\nobjective: 99%\nstages:\n  model_call: {budget_ms: 800}\n"
ROW = ("--burn-rate", "page:10m/5m:14.4")
HOSTILE_JAEGER = "http://jaeger.example:16686/x{{.}}/$(id)'\";"


def _budget_file(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(ONE_STAGE, encoding="utf-8")
    return path


def _rules(budgets: Path, *options: str) -> tuple[str, dict[str, Any]]:
    result = run_cli("rules", budgets.name, *ROW, *options, cwd=budgets.parent)
    assert result.returncode == 0, result.stderr
    return result.stdout, yaml.safe_load(result.stdout)


def _alerts(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for g in document["groups"]
        for r in g["rules"]
        if "alert" in r and r["labels"]["latency_budget_kind"] == "stage"
    ]


@pytest.mark.parametrize("payload", VISIBLE, ids=_ids(VISIBLE))
def test_rules_with_a_hostile_service_and_path_pass_promtool_lint(payload: str, promtool: str, tmp_path: Path) -> None:
    """A payload as --service and in the file's name: YAML reads it back and `check rules --lint-fatal` passes."""
    name = payload.replace("/", "_") + ".yaml"
    budgets = _budget_file(tmp_path / "b", name)
    text, document = _rules(budgets, "--service", payload, "--jaeger", HOSTILE_JAEGER)
    (group,) = document["groups"]
    assert group["name"] == f"latency-budget {payload}"
    assert all(r["labels"].get("service_name", payload) == payload for r in group["rules"])
    assert all(f"service_name={promql_string(payload)}" in r["expr"] for r in _alerts(document))
    out = tmp_path / "rules.yml"
    out.write_text(text, encoding="utf-8")
    result = _promtool(promtool, "check", "rules", "--lint-fatal", out)
    assert result.returncode == 0, result.stdout + result.stderr


def _series(labels: dict[str, str]) -> str:
    return "latency_budget_requests_total{" + ", ".join(f"{k}={promql_string(v)}" for k, v in labels.items()) + "}"


def _label_word(value: str) -> str:
    """A label value as one POSIX shell word: single-quoted, each ' written as '\\'' (the shell's own rule)."""
    return "'" + value.replace("'", "'\\''") + "'"


def _label_command(service: str, budgets: str) -> str:
    """The `next` command an alert with this service_name label must expand to (the label single-quoted)."""
    start = " ".join(map(shlex.quote, ["latency-budget", "report", "--jaeger", HOSTILE_JAEGER, "--service"]))
    end = " ".join(map(shlex.quote, ["--lookback", "10m", "--budgets", budgets]))
    return f"{start} {_label_word(service)} {end}"


def _next_argv(service: str, budgets: str) -> list[str]:
    return ["report", "--jaeger", HOSTILE_JAEGER, "--service", service, "--lookback", "10m", "--budgets", budgets]


def test_alert_annotations_expand_payload_labels_verbatim(promtool: str, tmp_path: Path) -> None:
    """Every payload as an alert's service_name label: after Prometheus expands the annotations, it is quoted text."""
    budgets = _budget_file(tmp_path, "b {{ . }}; touch pwned 😀.yaml")
    text, document = _rules(budgets, "--jaeger", HOSTILE_JAEGER)
    (tmp_path / "rules.yml").write_text(text, encoding="utf-8")
    (alert,) = _alerts(document)
    # The same rules for a file named plainly: what each annotation must read, the name aside.
    plain = _budget_file(tmp_path / "plain", "plain.yaml")
    _, reference = _rules(plain, "--jaeger", "http://plain:1")
    (expected_alert,) = _alerts(reference)
    series, expected = [], []
    for payload in PAYLOADS:
        labels = {
            "service_name": payload,
            "latency_budget_stage": "model_call",
            "latency_budget_kind": "stage",
            "latency_budget_profile": "default",
        }
        # Every request over budget: the ratio is 1 in every window, so every row fires at 100%.
        series.append({"series": _series({**labels, "latency_budget_within_budget": "false"}), "values": "0+60x20"})
        annotations = {
            key: value.replace("{{ $value | humanizePercentage }}", "100%").replace("plain.yaml", budgets.name)
            for key, value in expected_alert["annotations"].items()
        }
        annotations["next"] = _label_command(payload, budgets.name)
        tail = expected_alert["annotations"]["jaeger_search"].split("&", 1)[1]
        annotations["jaeger_search"] = f"{HOSTILE_JAEGER}/search?service={urllib.parse.quote_plus(payload)}&{tail}"
        expected.append({"exp_labels": {**labels, **alert["labels"]}, "exp_annotations": annotations})
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": "15m", "alertname": "LatencyBudgetBurnRate", "exp_alerts": expected}],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests, allow_unicode=False, width=1000), encoding="utf-8")
    result = _promtool(promtool, "test", "rules", "test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_expanded_next_command_runs_the_intended_argv_in_sh(tmp_path: Path) -> None:
    """The `next` annotation, as promtool expands it for each payload label, runs one argv in sh: no injection."""
    stub = tmp_path / "bin" / "latency-budget"
    stub.parent.mkdir()
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n", encoding="utf-8")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    budgets = "b {{ . }}; touch pwned 😀.yaml"
    for payload in PAYLOADS:
        command = _label_command(payload, budgets)
        ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout) == _next_argv(payload, budgets)
    assert not (tmp_path / "pwned").exists()


# Payloads without braces: written into `next` as they are, no template to expand (those with
# braces are template string constants: test_service_annotations_expand_verbatim expands them).
UNBRACED = [p for p in VISIBLE if "{" not in p and "}" not in p]


@pytest.mark.parametrize("payload", UNBRACED, ids=_ids(UNBRACED))
def test_next_with_service_runs_the_intended_argv_in_sh(payload: str, tmp_path: Path) -> None:
    """With --service PAYLOAD, the `next` annotation as written runs exactly the intended argv in sh."""
    budgets = _budget_file(tmp_path, "b $(touch pwned) 'q'.yaml")
    jaeger = "http://jaeger.example:16686/$(id)'\";"
    _, document = _rules(budgets, "--service", payload, "--jaeger", jaeger)
    (alert,) = _alerts(document)
    command = alert["annotations"]["next"]
    assert "{{" not in command
    stub = tmp_path / "bin" / "latency-budget"
    stub.parent.mkdir()
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n", encoding="utf-8")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert ran.returncode == 0, ran.stderr
    expected = _next_argv(payload, budgets.name)
    expected[2] = jaeger
    assert json.loads(ran.stdout) == expected
    assert not (tmp_path / "pwned").exists()


def test_service_annotations_expand_verbatim(promtool: str, tmp_path: Path) -> None:
    """--service with template payloads: promtool expands `next` to the shell-quoted argv and the search to the name."""
    for n, payload in enumerate([TEMPLATE, STRAY]):
        folder = tmp_path / str(n)
        budgets = _budget_file(folder, "b.yaml")
        text, document = _rules(budgets, "--service", payload)
        (folder / "rules.yml").write_text(text, encoding="utf-8")
        (alert,) = _alerts(document)
        labels = {
            "service_name": payload,
            "latency_budget_stage": "model_call",
            "latency_budget_kind": "stage",
            "latency_budget_profile": "default",
        }
        annotations = {
            k: v.replace("{{ $value | humanizePercentage }}", "100%") for k, v in alert["annotations"].items()
        }
        argv = ["latency-budget", "report", "--jaeger", "http://localhost:16686", "--service", payload]
        annotations["next"] = shlex.join([*argv, "--lookback", "10m", "--budgets", "b.yaml"])
        tail = annotations["jaeger_search"].split("&", 1)[1]
        annotations["jaeger_search"] = (
            f"http://localhost:16686/search?service={urllib.parse.quote(payload, safe='')}&{tail}"
        )
        tests = {
            "rule_files": ["rules.yml"],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        {"series": _series({**labels, "latency_budget_within_budget": "false"}), "values": "0+60x20"}
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": "15m",
                            "alertname": "LatencyBudgetBurnRate",
                            "exp_alerts": [
                                {"exp_labels": {**labels, **alert["labels"]}, "exp_annotations": annotations}
                            ],
                        }
                    ],
                }
            ],
        }
        (folder / "test.yml").write_text(yaml.safe_dump(tests, width=1000), encoding="utf-8")
        result = _promtool(promtool, "test", "rules", "test.yml", cwd=folder)
        assert result.returncode == 0, result.stdout + result.stderr


# -- what cannot be written safely is refused -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        *((["--service", p], "a service name cannot hold control, line-break or bidi characters") for p in INVISIBLE),
        (["--service", ""], "expected a service name, got an empty one"),
        (["--service", "s" * 256], "a service name has at most 255 characters"),
        (["--jaeger", "javascript:alert(1)"], "expected an http or https URL"),
        (["--jaeger", "file:///etc/passwd"], "expected an http or https URL"),
        (["--jaeger", "http://h/a b"], "expected an http or https URL"),
        (["--burn-rate", "page:110000d/5m:14.4"], "expected a duration Prometheus can hold (at most about 106751d)"),
        (["--slo-period", "200000d"], "expected a duration Prometheus can hold"),
        (
            ["--burn-rate", "page:1h/5m:14.4", "--burn-rate", "page:1h/5m:14.4"],
            "--burn-rate page:1h/5m:14.4 is given twice",
        ),
    ],
    ids=lambda value: terminal_text(str(value))[:40],
)
def test_unusable_rules_options_are_one_line_errors(args: list[str], fragment: str, tmp_path: Path) -> None:
    """An option whose value cannot be used in the rules is refused: exit 2, one line, nothing written."""
    result = run_cli("rules", _budget_file(tmp_path, "b.yaml"), *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert fragment in line
    assert line.isprintable()


@pytest.mark.parametrize("payload", INVISIBLE, ids=_ids(INVISIBLE))
def test_a_budget_path_that_cannot_be_pasted_is_refused(payload: str, tmp_path: Path) -> None:
    """A budget file whose name holds a line break, ESC or a bidi override is refused in one escaped line."""
    budgets = _budget_file(tmp_path, payload.replace("/", "_") + ".yaml")
    result = run_cli("rules", budgets.name, cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "the budget file's path cannot hold control or line-break characters" in line
    assert line.isprintable()


def test_rules_over_the_limit_stop_before_any_work(tmp_path: Path) -> None:
    """256 stages x 256 profiles is refused at once, naming the limit and --max-rules; a raised limit is obeyed."""
    stages = "".join(f"  s{i}: {{budget_ms: 10, match: {{name: s{i}}}}}\n" for i in range(256))
    profiles = "".join(f"  - name: p{i}\n    when: {{name: p{i}}}\n" for i in range(256))
    path = tmp_path / "big.yaml"
    path.write_text(f"version: 1\nobjective: 99%\nstages:\n{stages}profiles:\n{profiles}", encoding="utf-8")
    result = run_cli("rules", path, timeout=60)
    assert result.returncode == 2
    assert result.stderr == (
        "latency-budget: 258 stages (with total and first token) x 257 profiles x 3 burn-rate rows is 198,918 "
        "alerts, over the limit of 5,000 (--max-rules N raises it)\n"
    )
    small = tmp_path / "small.yaml"
    small.write_text(ONE_STAGE, encoding="utf-8")
    assert run_cli("rules", small, "--max-rules", "8").returncode == 2  # 3 x 1 x 3 = 9
    assert run_cli("rules", small, "--max-rules", "9").returncode == 0


def test_terminal_escapes_in_a_budget_key_are_shown_escaped(tmp_path: Path) -> None:
    """validate's error for a key of ESC/BEL and a forged line prints them escaped, on one line."""
    path = tmp_path / "b.yaml"
    path.write_text('version: 1\nstages:\n  "\\e]0;pwned\\a\\e[31mRED\\nlatency-budget: OK": {budget_ms: 1}\n')
    ran = run_cli("validate", path)
    assert ran.returncode == 1
    (line,) = ran.stderr.splitlines()
    assert "\\x1b]0;pwned\\x07\\x1b[31mRED\\x0alatency-budget: OK" in line
    assert line.isprintable()
