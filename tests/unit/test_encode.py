"""The output encoders, one per language, read back by that language's own parser where Python has one.

The real consumers (promtool, Chromium, a shell, a Markdown renderer) read the writers'
output in tests/cli/test_hostile_outputs.py.
"""

from __future__ import annotations

import shlex

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from latency_budget._encode import (
    exposition_help,
    html_text,
    markdown_cell,
    markdown_text,
    promql_string,
    shell_word,
    template_text,
    terminal_text,
    visible,
    yaml_scalar,
)

PAYLOADS = [
    '{{ with query "up" }}{{ . }}{{ end }}',
    "x; touch pwned",
    "a name with spaces",
    "line\nforged: true",
    "sep\u2028arated",
    "evil\u202etxt.exe",
    "assistant😀",
    "\x1b]0;pwned\x07\x1b[31mRED",
    "x | ![t](http://127.0.0.1:9/p.png) <img src=x>",
    "javascript:alert(1)",
    "back`tick``s",
    'it\'s "quoted" \\ back',
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_yaml_scalars_read_back_exactly(payload: str) -> None:
    """A YAML scalar parses back to the very string, on one line, whatever it holds."""
    encoded = yaml_scalar(payload)
    assert encoded.isprintable()  # no newline, U+2028 or control character
    assert yaml.safe_load(f"key: {encoded}\n") == {"key": payload}


@given(st.text())
def test_yaml_scalars_read_back_for_any_text(text: str) -> None:
    """Any text without lone surrogates round-trips through a YAML scalar; lone surrogates become U+FFFD."""
    expected = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    assert yaml.safe_load(yaml_scalar(text)) == expected


def _read_help(text: str) -> str:
    """A HELP line's text as Prometheus' text parser reads it: ``\\\\`` and ``\\n`` only, else an error."""
    out, chars = [], iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        escaped = next(chars)
        if escaped not in "\\n":
            raise ValueError(f"invalid escape sequence \\{escaped}")
        out.append("\n" if escaped == "n" else "\\")
    return "".join(out)


def _shown_help(text: str) -> str:
    """What a HELP line shows of ``text``: line feeds kept, other invisible characters as escape text."""
    return "".join("\n" if c == "\n" else "\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else visible(c) for c in text)


@pytest.mark.parametrize("payload", [*PAYLOADS, "ends with a backslash \\", "\\n is not a line feed"])
def test_exposition_help_reads_back_on_one_line(payload: str) -> None:
    """A HELP text stays on one line and a scraper's reading gives the text back, invisible characters shown."""
    encoded = exposition_help(payload)
    assert "\n" not in encoded
    assert encoded.isprintable()
    assert _read_help(encoded) == _shown_help(payload)


@given(st.text())
def test_exposition_help_reads_back_for_any_text(text: str) -> None:
    """Any text, lone surrogates included, is valid UTF-8 HELP text that reads back as the text shown."""
    encoded = exposition_help(text)
    encoded.encode("utf-8")
    assert _read_help(encoded) == _shown_help(text)


def test_promql_strings_keep_astral_characters_as_utf8() -> None:
    """😀 stays one UTF-8 character (no surrogate pair); quotes, backslashes and controls are escaped."""
    assert promql_string("assistant😀") == '"assistant😀"'
    assert promql_string('a"b\\c\nd\u202e') == '"a\\"b\\\\c\\x0ad\\u202e"'
    assert promql_string("\ud800") == '"\\ufffd"'


def test_template_text_wraps_only_text_with_braces() -> None:
    """Text without braces is kept; text with any becomes a Go template string constant, printed verbatim."""
    assert template_text("model_call") == "model_call"
    assert template_text('{{ query "up" }}') == '{{ "{{ query \\"up\\" }}" }}'
    assert template_text("x{") == '{{ "x{" }}'


@pytest.mark.parametrize("payload", [p for p in PAYLOADS if p.isprintable()])
def test_shell_words_split_back_to_one_argument(payload: str) -> None:
    """shlex.split reads a shell word back as exactly one argument, the payload."""
    assert shlex.split(f"cmd {shell_word(payload)} next") == ["cmd", payload, "next"]


def test_shell_words_refuse_invisible_characters() -> None:
    """A word with a newline or a bidi override is refused: a pasted command must show what it runs."""
    for payload in ("line\nbreak", "evil\u202etxt"):
        with pytest.raises(ValueError, match="shell word"):
            shell_word(payload)


def test_terminal_text_shows_controls_and_bidi_escaped() -> None:
    """ESC, BEL, newline, U+2028 and U+202E come out as visible escapes; printable text (😀 too) is kept."""
    assert terminal_text("\x1b]0;pwned\x07\nOK\u2028\u202e😀") == "\\x1b]0;pwned\\x07\\x0aOK\\u2028\\u202e😀"
    assert visible("plain text") == "plain text"


def test_markdown_text_escapes_what_starts_markup_only() -> None:
    """Inline Markdown: what starts markup is backslash-escaped, other punctuation is not; line breaks shown escaped."""
    assert markdown_text("![t](u) <b>|x\n") == "\\!\\[t\\](u) \\<b\\>\\|x\\\\x0a"
    assert markdown_text("(16 traces, 80 spans)") == "(16 traces, 80 spans)"


def test_markdown_cells_are_code_spans_with_a_longer_fence() -> None:
    """A name cell is a code span whose fence outruns the backticks inside; pipes are escaped."""
    assert markdown_cell("model_call") == "`model_call`"
    assert markdown_cell("a``b|c") == "```a``b\\|c```"
    assert markdown_cell("`x") == "`` `x ``"
    assert markdown_cell("") == ""


def test_html_text_escapes_markup_and_shows_bidi() -> None:
    """HTML text: markup and quotes escaped, bidi controls shown as visible escapes."""
    assert html_text('<img src=x onerror="a">\u202e') == "&lt;img src=x onerror=&quot;a&quot;&gt;\\u202e"
