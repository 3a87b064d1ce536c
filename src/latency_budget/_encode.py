"""One encoder per output language: an untrusted string in, a literal that language reads as text out.

Names from recorded traces (models, tools, data sources, span names), from budget files
(stages, profiles, keys) and from the command line (services, URLs, paths) end up in
Prometheus rules, Prometheus' exposition text, pasted shell commands, YAML, Markdown, HTML and terminals. Every writer
passes them through the function for its language; nothing untrusted is concatenated
into any of them raw. Standard library only: ``shlex.quote`` for shells, ``html.escape``
for HTML, the rest is the escapes each format defines.

"Shown escaped" means a character a reader cannot see or that changes how text is laid
out (C0 and C1 controls, ESC and BEL, line and paragraph separators, bidi overrides and
isolates, other format characters, lone surrogates) is written as ``\\xHH``, ``\\uHHHH``
or ``\\UHHHHHHHH`` text, so it is visible and inert.
"""

from __future__ import annotations

import html
import re
import shlex

__all__ = [
    "exposition_help",
    "html_text",
    "markdown_block",
    "markdown_cell",
    "markdown_text",
    "promql_string",
    "shell_word",
    "template_text",
    "terminal_text",
    "visible",
    "yaml_comment",
    "yaml_scalar",
]


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _shown(char: str) -> bool:
    # str.isprintable() is False for Cc, Cf (bidi controls among them), Zl, Zp, Zs other
    # than the space, Cs (lone surrogates), Co and Cn.
    return char == " " or char.isprintable()


def visible(text: str) -> str:
    """``text`` with every character that is not plainly visible written as an escape (``\\x1b``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(char if _shown(char) else _escape_char(char) for char in text)


def terminal_text(text: str) -> str:
    """Text for a terminal on one line: no control sequence (ESC, BEL), no line break, no bidi reordering."""
    return visible(text)


def _go_escaped(text: str) -> str:
    """The body of a Go (and PromQL) double-quoted string: valid UTF-8, no surrogate pair."""
    out: list[str] = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif _shown(char):
            out.append(char)
        elif 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\\ufffd")  # a lone surrogate has no UTF-8 form: the replacement character
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out)


def promql_string(text: str) -> str:
    """A PromQL string literal (``"..."``) that reads back as ``text``: astral characters stay UTF-8.

    ``json.dumps`` would write 😀 as the surrogate pair ``\\ud83d\\ude00``, which PromQL
    rejects; Go's escapes (``\\x``, ``\\u``, ``\\U``) are used instead.
    """
    return f'"{_go_escaped(text)}"'


def exposition_help(text: str) -> str:
    """The text of a Prometheus exposition ``# HELP`` line: a scraper reads it back as ``text``, shown.

    The format (text 0.0.4) knows two escapes there, ``\\\\`` and ``\\n``, and reads
    anything else after a backslash as an error; every other character that is not plainly
    visible is shown escaped as text (``\\x1b`` reads back as those four characters), and
    a lone surrogate, which has no UTF-8 form, as U+FFFD.
    """
    out: list[str] = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\ufffd")
        elif _shown(char):
            out.append(char)
        else:
            out.append("\\" + _escape_char(char))
    return "".join(out)


def template_text(text: str) -> str:
    """Text inside a Prometheus (Go ``text/template``) annotation that is printed, never expanded.

    Text without braces is returned as it is; text with any (``{{ query "up" }}``, a stray
    ``{``) becomes a template string constant, ``{{ "..." }}``, which prints it verbatim.
    """
    if "{" not in text and "}" not in text:
        return text
    return '{{ "' + _go_escaped(text) + '" }}'


def yaml_scalar(text: str) -> str:
    """A double-quoted YAML scalar that every YAML 1.1 and 1.2 parser reads back as ``text``.

    Characters that are not plainly visible (newline, U+2028, NEL) are escaped, so that no
    parser can see a line break inside it.
    """
    out: list[str] = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif _shown(char) and char not in "\x85\u2028\u2029\ufeff":
            out.append(char)
        elif 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(_escape_char(char))
    return f'"{"".join(out)}"'


def yaml_comment(text: str) -> str:
    """Text for a ``# ...`` YAML comment: nothing in it can end the comment's line."""
    return visible(text)


def shell_word(text: str) -> str:
    """One POSIX shell word (``shlex.quote``): the shell passes ``text`` as one argument, unexpanded.

    A word with a character that is not plainly visible is refused (``ValueError``): a
    pasted command must show what it runs.
    """
    if not text.isprintable():
        raise ValueError(f"cannot be written as a shell word one can read: {visible(text)!r}")
    return shlex.quote(text)


# What can start markup anywhere in a line: code spans, emphasis, links and images, autolinks and raw
# HTML, entities, GFM tables and strikethrough, GitHub's math; and the escape itself.
_MARKDOWN_INLINE = frozenset("\\`*_[]<>!&|~$")
# GFM's extended autolinks: ``www.``, ``scheme://`` and e-mail addresses.
_MARKDOWN_AUTOLINK = re.compile(r"(?i)(?<=www)\.|:(?=//)|@")
# At the start of a line (after up to three spaces): headings, lists, quotes, thematic breaks, setext underlines.
_MARKDOWN_LINE_START = re.compile(r"( {0,3})([#+\-=>]|\d{1,9}(?=[.)]))")


def markdown_text(text: str) -> str:
    """Inline Markdown that renders as ``text``, escaping only what Markdown would read as markup.

    No link, image, autolink, HTML, entity, emphasis, strikethrough, math or code span can
    start inside it, nor a heading, list or quote where it starts a line; it stays on one
    line (line breaks are shown escaped). Other punctuation, such as ``(16 traces, 80 spans)``,
    is left as it is.
    """
    shown = "".join("\\" + char if char in _MARKDOWN_INLINE else char for char in visible(text))
    shown = _MARKDOWN_AUTOLINK.sub(lambda found: "\\" + found.group(), shown)
    start = _MARKDOWN_LINE_START.match(shown)
    if start is not None:
        spaces, marker = start.groups()
        if marker[0].isdigit():  # an ordered list's number: escape the . or ) after it
            cut = start.end()
            return shown[:cut] + "\\" + shown[cut:]
        return spaces + "\\" + shown[len(spaces) :]
    return shown


def markdown_cell(text: str) -> str:
    """A name in a GitHub-flavoured Markdown table cell: a code span showing ``text`` literally.

    Inside a code span nothing is markup (no HTML, link or image); a pipe is escaped, which
    GitHub's tables undo inside code spans too, so it cannot split the row; the fence is
    longer than any run of backticks in ``text``.
    """
    shown = visible(text).replace("|", "\\|")
    if not shown:
        return ""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    pad = " " if shown[0] in "` " or shown[-1] in "` " else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def markdown_block(text: str, language: str = "") -> str:
    """A fenced Markdown code block showing ``text`` literally: its fence longer than any run of backticks in it."""
    shown = "\n".join(visible(line) for line in text.split("\n"))
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    return f"{fence}{language}\n{shown}\n{fence}"


def html_text(text: str) -> str:
    """HTML text or a quoted attribute value showing ``text``: markup escaped, bidi controls shown escaped."""
    return html.escape(visible(text), quote=True)
