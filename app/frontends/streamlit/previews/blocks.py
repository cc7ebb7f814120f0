"""The code blocks of an answer that a preview can draw: an HTML page, an SVG picture or a Mermaid diagram."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from markdown_it import MarkdownIt

Kind = Literal["html", "svg", "mermaid"]

# The languages a fence names for each kind (```html, ```svg, ```mermaid ...); ```xml is an SVG when it holds one.
_LANGUAGES: dict[str, Kind] = {"html": "html", "htm": "html", "xhtml": "html", "svg": "svg", "mermaid": "mermaid",
                               "mmd": "mermaid"}
# A preview's source travels in its frame's URL (route.py), which Chromium caps at 2 MB.
MAX_SOURCE_CHARS = 200_000


@dataclass(frozen=True)
class Preview:
    kind: Kind
    source: str
    number: int  # 1-based, among the answer's previews

    @property
    def title(self) -> str:
        names = {"html": "HTML page", "svg": "SVG picture", "mermaid": "Mermaid diagram"}
        return f"{self.number}. {names[self.kind]}"

    @property
    def too_large(self) -> bool:
        return len(self.source) > MAX_SOURCE_CHARS


def previews_in(text: str) -> list[Preview]:
    """The fenced code blocks of `text` that a preview draws, in order. Parsed as the page renders markdown, so a
    fence inside another block or an unclosed one at the end counts as it shows."""
    found: list[Preview] = []
    for token in _parser().parse(text):
        if token.type != "fence" or not token.content.strip():
            continue
        language = token.info.strip().split(maxsplit=1)[0].lower() if token.info.strip() else ""
        kind = _LANGUAGES.get(language)
        if kind is None and language == "xml" and token.content.lstrip().startswith("<svg"):
            kind = "svg"
        if kind is not None:
            found.append(Preview(kind, token.content, len(found) + 1))
    return found


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark")
