"""The code blocks of an answer that a preview can draw: an HTML page, an SVG picture or a Mermaid diagram."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from markdown_it import MarkdownIt

Kind = Literal["html", "svg", "mermaid"]

# The languages a fence names for each kind (```html, ```svg, ```mermaid ...); ```xml is an SVG when it holds one.
_LANGUAGES: dict[str, Kind] = {"html": "html", "htm": "html", "xhtml": "html", "svg": "svg", "mermaid": "mermaid",
                               "mmd": "mermaid"}
_XML_PREAMBLE = re.compile(r"\A\s*(?:<\?xml[^>]*\?>\s*|<!--.*?-->\s*|<!DOCTYPE[^>]*>\s*)*", re.DOTALL | re.IGNORECASE)
_SCRIPTED = re.compile(r"<script|\bon[a-z]+\s*=|javascript:", re.IGNORECASE)


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
    def has_script(self) -> bool:
        """Whether the page has anything to run (the choice to run it is offered only then)."""
        return bool(_SCRIPTED.search(self.source))


def previews_in(text: str, first_number: int = 1) -> list[Preview]:
    """The fenced code blocks of one message's `text` that a preview draws, in order, numbered from
    `first_number`. Parsed as the page renders markdown, so a fence inside another block or an unclosed one at the
    end counts as it shows."""
    found: list[Preview] = []
    for token in _parser().parse(text):
        if token.type != "fence" or not token.content.strip():
            continue
        language = token.info.strip().split(maxsplit=1)[0].lower() if token.info.strip() else ""
        kind = _LANGUAGES.get(language)
        if kind is None and language == "xml" and _XML_PREAMBLE.sub("", token.content, count=1).startswith("<svg"):
            kind = "svg"
        if kind is not None:
            found.append(Preview(kind, token.content, first_number + len(found)))
    return found


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark")
