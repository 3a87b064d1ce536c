"""markdown_text against a real Markdown parser: whatever the text, it renders as that text and nothing else."""

from __future__ import annotations

import markdown_it  # the test extra has it
from hypothesis import given
from hypothesis import strategies as st

from latency_budget._encode import markdown_text, visible

PARSER = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])

# Markdown's punctuation, digits, spaces and a few letters: the text most likely to turn into markup.
_TEXT = st.text(alphabet=st.sampled_from(list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ 0123456789abwx.\n")), max_size=40)


def _rendered_text(source: str) -> tuple[list[str], str]:
    """(kinds of the block tokens, the text of the inline tokens) of ``source`` parsed as a Markdown document."""
    tokens = PARSER.parse(source)
    blocks = [token.type for token in tokens if token.type != "inline"]
    inline = [child for token in tokens if token.type == "inline" for child in token.children or ()]
    assert all(child.type == "text" for child in inline), [child.type for child in inline]
    return blocks, "".join(child.content for child in inline)


@given(_TEXT)
def test_markdown_text_renders_as_the_text_only(text: str) -> None:
    """Any text, escaped, parses to one paragraph of plain text equal to the text shown (no link, list, code...)."""
    blocks, rendered = _rendered_text("Prefix " + markdown_text(text))
    assert blocks == ["paragraph_open", "paragraph_close"]
    assert rendered.rstrip(" ") == ("Prefix " + visible(text)).rstrip(" ")


@given(_TEXT.filter(lambda t: visible(t).strip(" ")))
def test_markdown_text_at_the_start_of_a_line_is_no_block_markup(text: str) -> None:
    """At the start of a line too: no heading, list, quote, thematic break or code block."""
    source = markdown_text(text)
    if source.startswith("    "):
        source = source.lstrip(" ")  # four spaces would be a code block: callers never start a line with them
    blocks, rendered = _rendered_text(source)
    assert blocks == ["paragraph_open", "paragraph_close"]
    assert rendered.strip(" ") == visible(text).strip(" ")


def test_plain_punctuation_is_left_alone() -> None:
    """Parentheses, commas, dots, colons and the like need no escape: the issue's '\\(16 traces\\, 80 spans\\)'."""
    assert markdown_text("(16 traces, 80 spans); p95 at 16:40.") == "(16 traces, 80 spans); p95 at 16:40."
