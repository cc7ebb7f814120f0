"""A document as parts in reading order, each with where it is: a PDF's pages, a PPTX's slides, a DOCX's,
Markdown's or HTML's paragraphs under their heading, a text file's paragraphs by line. The readers and their limits
against hostile files are those of app/tools/documents.py, read here whole instead of up to a character budget."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import PurePath

from app.config import DocumentSettings
from app.tools.documents import Cut, DocumentError, Part, decode_text, iter_parts

OnPart = Callable[[int], None]  # called with the number of parts read so far (a progress bar's feed)
_MARKDOWN_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
_MARKDOWN_SUFFIXES = {".md", ".markdown"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "li", "pre", "blockquote", "td", "th", "dt", "dd", "figcaption", "caption"}


def read_parts(name: str, data: bytes, settings: DocumentSettings | None = None,
               on_part: OnPart | None = None) -> tuple[list[Part], str]:
    """Every part of the document, and why reading stopped early ("" when it did not)."""
    settings = settings or DocumentSettings.from_env()
    suffix = PurePath(name).suffix.lower()
    parts: list[Part] = []
    cut = ""
    if suffix in (".pdf", ".docx", ".pptx"):
        source: Iterator[Part | Cut] = iter_parts(name, data, settings)
    else:
        text = decode_text(name, data)
        if suffix in _HTML_SUFFIXES:
            source = _html_parts(text)
        elif suffix in _MARKDOWN_SUFFIXES:
            source = _markdown_parts(text)
        else:
            source = _text_parts(text)
    for part in source:
        if isinstance(part, Cut):
            cut = part.reason
            break
        if part.text.strip():
            parts.append(part)
            if on_part is not None:
                on_part(len(parts))
    if not parts:
        raise DocumentError(f"{name} contains no text" + (" (a scan? text recognition is not available here)."
                                                           if suffix == ".pdf" else "."))
    return parts, cut


def _markdown_parts(text: str) -> Iterator[Part]:
    """Paragraphs under the heading they follow (before the first heading: by line); fenced code is kept whole,
    and a `#` in it is no heading."""
    heading, fenced, start = "", False, 1
    paragraph: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        found = None if fenced else _MARKDOWN_HEADING.match(line)
        if found or (not line.strip() and not fenced):
            if paragraph:
                yield Part(heading or f"line {start}", "\n".join(paragraph))
                paragraph = []
            if found:
                heading = found.group(2)[:200]
                yield Part(heading, found.group(2))
            continue
        if not paragraph:
            start = number
        paragraph.append(line)
    if paragraph:
        yield Part(heading or f"line {start}", "\n".join(paragraph))


def _html_parts(text: str) -> Iterator[Part]:
    """Headings, paragraphs, list items, table cells and code blocks of an HTML page, in order, without its
    scripts, styles and navigation (the standard library's parser: it never fails on broken markup)."""
    reader = _HtmlBlocks()
    reader.feed(text)
    reader.close()
    heading = ""
    for tag, content in reader.blocks:
        if tag in _HEADINGS:
            heading = content[:200]
        yield Part(heading or "top of the page", content)


class _HtmlBlocks(HTMLParser):
    """Collects (tag, text) of each outermost block and heading."""

    _SKIPPED = {"script", "style", "noscript", "template", "nav", "header", "footer", "svg"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []
        self._open: str | None = None  # the block being read
        self._text: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIPPED:
            self._skipping += 1
        elif self._open is None and (tag in _HEADINGS or tag in _BLOCKS):
            self._open, self._text = tag, []
        elif self._open is not None and tag == "br":
            self._text.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag == self._open:
            raw = "".join(self._text)
            content = raw.strip("\n") if tag == "pre" else " ".join(raw.split())
            if content.strip():
                self.blocks.append((tag, content))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None and not self._skipping:
            self._text.append(data)


def _text_parts(text: str) -> Iterator[Part]:
    """Paragraphs (blank-line separated), each located by its first line."""
    start = 1
    paragraph: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if not paragraph:
                start = number
            paragraph.append(line)
        elif paragraph:
            yield Part(f"line {start}", "\n".join(paragraph))
            paragraph = []
    if paragraph:
        yield Part(f"line {start}", "\n".join(paragraph))
