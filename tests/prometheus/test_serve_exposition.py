"""serve's Prometheus text under the real promtool: every row lint-clean, and hostile HELP text still parses.

``promtool check metrics`` reads the exposition with Prometheus' own text parser (an invalid
escape is a parse error, exit 1) and lints it (exit 3: a counter without ``_total``, a
missing HELP, a unit that is not a base unit...).
"""

from __future__ import annotations

import subprocess

import pytest

from latency_budget._encode import exposition_help
from latency_budget._serve.exposition import exposition
from latency_budget._serve.stats import METRICS

PAYLOADS = [
    '{{ with query "up" }}{{ . }}{{ end }}',
    "line\nforged_metric 1",
    "sep\u2028arated",
    "evil\u202etxt.exe",
    "assistant😀",
    "\x1b]0;pwned\x07\x1b[31mRED",
    "back\\slash\\n and \\x1b written out",
    "ends with a backslash \\",
    'it\'s "quoted"',
    "lone \ud800 surrogate",
]


def _check(promtool: str, text: str) -> subprocess.CompletedProcess[bytes]:
    """``promtool check metrics`` on ``text`` (a lone surrogate written as the invalid bytes it would be)."""
    data = text.encode("utf-8", "surrogatepass")
    return subprocess.run([promtool, "check", "metrics"], input=data, capture_output=True, check=False, timeout=60)


def test_serves_exposition_is_lint_clean(promtool: str) -> None:
    """Every row of the table, as GET /metrics writes it, parses and passes promtool's lint."""
    done = _check(promtool, exposition({row.name: 7 for row in METRICS}))

    assert done.returncode == 0, (done.stdout, done.stderr)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_help_text_parses_as_one_help_line(promtool: str, payload: str) -> None:
    """A HELP line through exposition_help parses, adds no line (no forged sample) and lints clean."""
    text = f"# HELP test_help {exposition_help(payload)}\n# TYPE test_help counter\ntest_help 1\n"
    raw = f"# HELP test_help {payload}\n# TYPE test_help counter\ntest_help 1\n"

    done = _check(promtool, text.replace("test_help", "test_help_total"))
    broken = _check(promtool, raw.replace("test_help", "test_help_total"))

    assert done.returncode == 0, (done.stdout, done.stderr)
    assert len(text.splitlines()) == 3
    if "\n" in payload or "\\" in payload:  # the check can fail: written raw, these break the format
        assert broken.returncode != 0
