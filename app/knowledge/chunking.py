"""Parts of a document (app/knowledge/reading.py) packed into passages for search: about `size` characters each,
cut at paragraph, then sentence, then word boundaries, never across two sections (a passage is on one page, one
slide, under one heading), and each starting with the end of the one before it (`overlap`), so that a sentence cut
between two passages is found whole in one of them. Parts located only by their place ("line 40", "paragraph 7":
text with no headings) are one section, and a passage is located where it starts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby

from app.tools.documents import Part

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_BY_PLACE = re.compile(r"^(line|paragraph) \d+$")


@dataclass(frozen=True)
class Passage:
    location: str  # "page 212", "slide 3", a heading, "line 40"
    text: str


def chunk(parts: list[Part], size: int = 1200, overlap: int = 200) -> list[Passage]:
    """The passages of a document, in reading order."""
    if size < 100 or not 0 <= overlap < size // 2:
        raise ValueError("a passage is at least 100 characters, and overlaps less than half of it")
    passages: list[Passage] = []
    for _, group in groupby(parts, key=lambda part: "" if _BY_PLACE.match(part.location) else part.location):
        pieces = [(text, starts, part.location) for part in group
                  for text, starts in _pieces(part.text, size - overlap)]
        passages.extend(_pack(pieces, size, overlap))
    return passages


def _pieces(text: str, limit: int) -> list[tuple[str, bool]]:
    """A part cut into pieces of at most `limit` characters, each marked whether it starts a paragraph: its
    paragraphs, a long one at its sentences, a long sentence at its words, a long word where it must."""
    pieces: list[tuple[str, bool]] = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= limit:
            pieces.append((paragraph, True))
            continue
        first = True
        for sentence in _SENTENCE_END.split(paragraph):
            start = 0  # a long sentence is walked through by index: re-slicing its rest each time is quadratic
            while len(sentence) - start > limit:
                cut = sentence.rfind(" ", start, start + limit)
                cut = cut if cut > start + limit // 2 else start + limit
                pieces.append((sentence[start:cut].strip(), first))
                first = False
                start = cut
                while start < len(sentence) and sentence[start].isspace():
                    start += 1
            if sentence[start:].strip():
                pieces.append((sentence[start:].strip(), first))
                first = False
    return pieces


def _pack(pieces: list[tuple[str, bool, str]], size: int, overlap: int) -> list[Passage]:
    """Pieces joined into passages of at most `size` characters (a paragraph after a blank line, a sentence after
    a space), each located where its first piece is; each passage after the first starts with the last words of the
    one before, up to `overlap`."""
    passages: list[Passage] = []
    current, where = "", ""
    carried = ""  # the overlap: what the next passage starts with
    for piece, starts_paragraph, location in pieces:
        joiner = "\n\n" if starts_paragraph else " "
        joined = f"{current}{joiner}{piece}" if current else (f"{carried} {piece}".strip() if carried else piece)
        if len(joined) <= size:
            current, where = joined, where if current else location
            continue
        if current:
            passages.append(Passage(where, current))
            carried = _tail(current, overlap)
        current, where = (f"{carried} {piece}".strip() if carried else piece), location
        if len(current) > size:  # the carried words do not fit with this piece: start it alone
            current = piece
    if current and (not passages or current != carried):
        passages.append(Passage(where, current))
    return passages


def _tail(text: str, overlap: int) -> str:
    """The last `overlap` characters of `text`, starting at a word."""
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    tail = text[-overlap:]
    space = tail.find(" ")
    return tail[space + 1:] if 0 <= space < len(tail) - 1 else tail
