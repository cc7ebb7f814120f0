"""Markdown that cannot make the browser fetch anything: every image becomes a plain link.

Streamlit renders markdown (st.markdown, captions, alerts, toasts, image captions and the labels of expanders,
status cards and buttons) with react-markdown, which turns `![alt](url)`, `![alt][ref]`, `![alt][]` and `![ref]`
into an <img> that the browser loads at once. Text written by a model, a web page, a document, an MCP server or
an imported file could so send whatever it puts in the URL to any host. Nothing else fetches: raw HTML is not
rendered (no call passes unsafe_allow_html), autolinks are links, KaTeX runs without `trust`.

Every image has one thing in common: its opener `![` outside code. A backslash-escaped `\\!` can never open one and
renders as "!", so escaping that `!` turns the image into "!" and a plain link with the same text and URL (followed
only when clicked), and leaves all other markdown as it was. The output is still markdown, written by inserting
single backslashes into the original text: nothing is re-serialised, so nothing else can change.

Only code needs parsing: inside a code span or block `![` is text and a backslash would show. Which openers are
inside code is decided with markdown-it (CommonMark, like the micromark parser under react-markdown): every opener
is replaced by a unique marker and the text parsed once per dialect Streamlit may apply (with and without its
`$` math, with and without indented code, which a GFM footnote can turn into a paragraph); an opener is left alone
only if it is inside code in all of them. Text with constructs markdown-it does not know (Streamlit's `:name[...]`
directives, `:::` containers) gets no such exemption. Finally the output is parsed again in every dialect; should
any image remain, every opener is escaped, code included. Dialects that cannot differ on a text (math without a
`$`, indented code where there is none) are not parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.rules_block import make_fence_rule
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

_OPENER = "!["
_CODE_TOKENS = ("code_inline", "code_block", "fence")
# Directives (`:red[...]`, `:::note`) change where brackets and blocks end, and markdown-it does not parse them.
_UNKNOWN_CONSTRUCTS = re.compile(r":[A-Za-z][\w/-]*\[|:::")


def safe_markdown(text: str, *, streaming: bool = False) -> str:
    """`text` as markdown whose images (outside code) are plain links: nothing in it loads a remote resource.

    `streaming`: the text is redrawn many times a second as it grows; every opener is escaped, code included, in
    linear time (parsing the whole text per redraw is quadratic), and the final draw leaves code as written."""
    if _OPENER not in text:  # the common case costs one substring search
        return text
    openers = _openers(text)
    if streaming:
        return _escape(text, openers)
    exempt = _inside_code(text, openers)
    safe = _escape(text, [i for i in openers if i not in exempt])
    if exempt and _has_image(safe):
        safe = _escape(text, openers)
    return safe


def safe_label(text: str) -> str:
    """`text` for a label (expander, status card, button, toast): every image opener escaped, code included, since
    Streamlit rewrites a label's markdown before parsing it (a leading `>` or `-` is escaped) and labels are one
    short line where a visible backslash in code costs little."""
    return safe_markdown(text, streaming=True)


def _openers(text: str) -> list[int]:
    """Positions of the `!` of every `![` that is not already escaped (preceded by an odd run of backslashes)."""
    found = []
    for match in re.finditer(r"(\\*)!\[", text):
        if len(match.group(1)) % 2 == 0:
            found.append(match.end(1))
    return found


def _escape(text: str, openers: list[int]) -> str:
    return _replace_openers(text, openers, lambda _: "\\!")


def _inside_code(text: str, openers: list[int]) -> set[int]:
    """The openers that every dialect's parse puts inside a code span or code block."""
    if not openers or _UNKNOWN_CONSTRUCTS.search(text):
        return set()
    mark = next((chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text), None)
    if mark is None:  # the text uses every private-use character: no unique marker, so no exemption
        return set()
    # The probe differs from the output only where a marker stands for `\!`: neither opens an image or HTML, so
    # both texts have the same structure.
    probe = _replace_openers(text, openers, lambda n: f"{mark}{n}{mark}")
    marker = re.compile(f"{mark}(\\d+){mark}")
    exempt: set[int] | None = None
    for tokens in _parses(probe):
        inside = {openers[int(m.group(1))] for token in _code_tokens(tokens) for m in marker.finditer(token.content)}
        exempt = inside if exempt is None else exempt & inside
    return exempt or set()


def _replace_openers(text: str, positions: list[int], replacement: Callable[[int], str]) -> str:
    """`text` with the `!` at each of `positions` (in order) replaced by replacement(its index)."""
    parts, last = [], 0
    for n, position in enumerate(positions):
        parts.append(text[last:position])
        parts.append(replacement(n))
        last = position + 1  # the `!` itself
    parts.append(text[last:])
    return "".join(parts)


def _code_tokens(tokens: list[Token]) -> Iterable[Token]:
    for token in tokens:
        if token.type in _CODE_TOKENS:
            yield token
        if token.children:
            yield from _code_tokens(token.children)


def _has_image(text: str) -> bool:
    return any(_contains(tokens, "image") for tokens in _parses(text))


def _contains(tokens: list[Token], kind: str) -> bool:
    return any(token.type == kind or _contains(token.children or [], kind) for token in tokens)


def _parses(text: str) -> list[list[Token]]:
    """`text` parsed in every dialect that can differ on it: math only where there is a `$`, and without indented
    code only where a parse with it found some (otherwise the two are the same parse)."""
    parses = []
    for math in (False, True) if "$" in text else (False,):
        tokens = _dialect(math, indented_code=True).parse(text)
        parses.append(tokens)
        if _contains(tokens, "code_block"):
            parses.append(_dialect(math, indented_code=False).parse(text))
    return parses


def _dialects() -> list[MarkdownIt]:
    """Every dialect (for tests): CommonMark with and without `$` math, with and without indented code."""
    return [_dialect(math, code) for math in (False, True) for code in (True, False)]


@cache
def _dialect(math: bool, indented_code: bool) -> MarkdownIt:
    """CommonMark with GFM tables and strikethrough and HTML recognised (micromark always recognises it, though
    Streamlit does not render it); `math`: with `$` math as remark-math parses it."""
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    if math:
        parser.block.ruler.before("fence", "math_block",
                                  make_fence_rule(markers=("$",), token_type="math_block", min_markers=2,
                                                  disallow_marker_in_info=("$",)),
                                  {"alt": ["paragraph", "reference", "blockquote", "list"]})
        parser.inline.ruler.before("backticks", "math_inline", _math_inline)
    return parser if indented_code else parser.disable("code")


def _math_inline(state: StateInline, silent: bool) -> bool:
    """`$...$`, `$$...$$`: remark-math's inline math, parsed like a code span (a run of n `$` closed by a run of
    exactly n), so that a backtick inside it opens no code span."""
    start = state.pos
    if state.src[start] != "$":
        return False
    end = start
    while end < state.posMax and state.src[end] == "$":
        end += 1
    length = end - start
    search = end
    while (close := state.src.find("$", search, state.posMax)) != -1:
        search = close
        while search < state.posMax and state.src[search] == "$":
            search += 1
        if search - close == length:
            if not silent:
                token = state.push("math_inline", "math", 0)
                token.content = state.src[end:close]
            state.pos = search
            return True
    if not silent:
        state.pending += state.src[start:end]
    state.pos = end
    return True
