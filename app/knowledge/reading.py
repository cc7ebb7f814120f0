"""A document as parts in reading order, each with where it is: a PDF's pages, a PPTX's slides, a DOCX's,
Markdown's or HTML's paragraphs under their heading, a text file's paragraphs by line. The readers and their limits
against hostile files are those of app/tools/documents.py, read here whole instead of up to a character budget."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing, nullcontext
from pathlib import PurePath

from app.config import DocumentSettings
from app.tools.documents import UPLOAD_TYPES, Cut, DocumentError, Part, decode_text, iter_parts

OnPart = Callable[[int], None]  # called with the number of parts read so far (a progress bar's feed)
_HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
_MARKDOWN_SUFFIXES = {".md", ".markdown"}
# What knowledge reads, by file name extension (without the dot): what a message takes, and HTML and Markdown.
READABLE_TYPES = sorted({*UPLOAD_TYPES, *(suffix.lstrip(".") for suffix in _HTML_SUFFIXES | _MARKDOWN_SUFFIXES)})
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "li", "ul", "ol", "pre", "blockquote", "td", "th", "tr", "table", "dt", "dd", "dl", "figcaption",
           "caption", "div", "section", "article", "main", "aside", "body", "hr", "figure", "address"}
_SKIPPED = {"script", "style", "noscript", "template", "nav", "header", "footer", "svg", "head"}


def read_parts(name: str, data: bytes, settings: DocumentSettings | None = None,
               on_part: OnPart | None = None, max_chars: int | None = None) -> tuple[list[Part], str]:
    """Every part of the document, and why reading stopped early ("" when it did not). Past `max_chars` characters
    reading stops with a DocumentError: a document that could never be stored is not read to its end."""
    settings = settings or DocumentSettings.from_env()
    suffix = PurePath(name).suffix.lower()
    parts: list[Part] = []
    cut = ""
    characters = 0
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
    with closing(source) if isinstance(source, Generator) else nullcontext():  # a cut stops the reader at once
        for part in source:
            if isinstance(part, Cut):
                cut = part.reason
                break
            if part.text.strip():
                parts.append(part)
                characters += len(part.text)
                if max_chars is not None and characters > max_chars:
                    raise DocumentError(f"{name} holds more than {max_chars:,} characters, more than one document "
                                        "may (DEMO_KNOWLEDGE_MAX_DOCUMENT_PASSAGES): split it, or ask an "
                                        "administrator.")
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
        found = None if fenced else _heading(line)
        if found is not None or (not line.strip() and not fenced):
            if paragraph:
                yield Part(heading or f"line {start}", "\n".join(paragraph))
                paragraph = []
            if found is not None:
                heading = found[:200]
                yield Part(heading, found)
            continue
        if not paragraph:
            start = number
        paragraph.append(line)
    if paragraph:
        yield Part(heading or f"line {start}", "\n".join(paragraph))


def _heading(line: str) -> str | None:
    """An ATX heading's title ("## Setup ##" -> "Setup"), None for any other line. Read by hand, in linear time: a
    regular expression for it backtracks for minutes on a long line of spaces."""
    indent = len(line) - len(line.lstrip(" "))
    rest = line[indent:]
    level = len(rest) - len(rest.lstrip("#"))
    if indent > 3 or not 1 <= level <= 6 or (len(rest) > level and rest[level] not in " \t"):
        return None
    title = rest[level:].strip().rstrip("#").strip()
    return title or None


def _html_parts(text: str) -> Iterator[Part]:
    """An HTML page's text in blocks (paragraphs, list items, cells, code, and text between them), each under the
    heading it follows, without scripts, styles and navigation. lxml's parser, in one pass: it closes the tags a
    page leaves open (`<p>one<p>two`) as browsers do, and takes linear time on any markup."""
    import lxml.html
    from lxml import etree

    try:
        root = lxml.html.document_fromstring(text)
    except (etree.ParserError, ValueError):
        yield from _text_parts(text)
        return
    heading = ""
    block: list[str] = []
    skipping = 0  # inside a script, style or navigation element: its text is not the page's
    in_heading: list[str] | None = None

    def flush(preformatted: bool = False) -> Iterator[Part]:
        joined = "".join(block)
        content = joined.strip("\n") if preformatted else " ".join(joined.split())  # code keeps its lines
        block.clear()
        if content.strip():
            yield Part(heading or "top of the page", content)

    for action, element in etree.iterwalk(root, events=("start", "end")):
        tag = element.tag if isinstance(element.tag, str) else ""
        if action == "start":
            if tag in _SKIPPED:
                skipping += 1
            elif not skipping:
                if tag in _HEADINGS or tag in _BLOCKS:
                    yield from flush()
                if tag in _HEADINGS:
                    in_heading = []
                (in_heading if in_heading is not None else block).append(element.text or "")
            continue
        if tag in _SKIPPED:
            skipping -= 1
        elif not skipping:
            if tag in _HEADINGS and in_heading is not None:
                heading = " ".join("".join(in_heading).split())[:200] or heading
                in_heading = None
                if heading:
                    yield Part(heading, heading)
            elif tag in _BLOCKS or tag == "br":
                yield from flush(preformatted=tag == "pre")
        if not skipping:
            (in_heading if in_heading is not None else block).append(element.tail or "")
    yield from flush()


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
