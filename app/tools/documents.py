"""Text from uploaded files (and fetched PDFs): pdf, docx with tables, pptx, and text files of any encoding.

Reading stops at the character budget, and the limits in DocumentSettings refuse decompression bombs (a zip or a
PDF stream of a few hundred KB that unpacks to gigabytes) before they take the memory."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from charset_normalizer import from_bytes

from app.config import DocumentSettings
from app.domain.conversation import Attachment

if TYPE_CHECKING:
    from pypdf import PdfReader

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MB = 2**20
TEXT_SUFFIXES = {
    ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".ini",
    ".xml", ".html", ".htm", ".log", ".py", ".js", ".ts", ".java", ".c", ".h", ".cpp", ".go", ".rs", ".sh", ".sql",
}
UPLOAD_TYPES = sorted({"pdf", "docx", "pptx", *(suffix.lstrip(".") for suffix in TEXT_SUFFIXES)})


class DocumentError(ValueError):
    """A file that cannot be read; the message says why and what to do."""


@dataclass(frozen=True)
class Extracted:
    """Text read from a file, and why it stops early ("" when it is the whole text)."""

    text: str
    cut: str = ""


class _TextBudget:
    """Collects extracted text up to a number of characters, so extraction stops there instead of first building
    the whole text (an Office file can hold hundreds of millions of characters in a few hundred KB)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.cut = ""
        self._parts: list[str] = []

    def add(self, part: str, separator: str = "\n\n") -> bool:
        """Append `part` (after `separator` unless it comes first); False once full: stop reading."""
        piece = separator + part if self._parts else part.lstrip()
        room = self.limit - self.size
        if len(piece) > room:
            self._parts.append(piece[:room])
            self.size = self.limit
            self.cut = f"cut to the first {self.limit:,} characters to fit the context (reading stopped there)"
            return False
        self._parts.append(piece)
        self.size += len(piece)
        return True

    def result(self) -> Extracted:
        return Extracted("".join(self._parts), self.cut)


@dataclass(frozen=True)
class Part:
    """One piece of a document in reading order: a PDF page, a slide, a paragraph or a table row of a DOCX (under
    its heading). `location` is what a citation names ("page 212", "slide 3", "Installation"); `separator` joins it
    to the text before it when the document is read whole."""

    location: str
    text: str
    separator: str = "\n\n"
    labelled: bool = False  # read whole, the text is headed by its location: "[page 3]"


@dataclass(frozen=True)
class Cut:
    """Reading stopped early, and why (a limit on pages): the parts before it are the document's readable text."""

    reason: str


def iter_parts(name: str, data: bytes, settings: DocumentSettings | None = None) -> Generator[Part | Cut]:
    """A PDF's, DOCX's or PPTX's parts, as they are read (the limits against hostile files apply as in
    `read_document`); DocumentError when the file cannot be read or goes past a limit."""
    settings = settings or DocumentSettings.from_env()
    suffix = PurePath(name).suffix.lower()
    readers = {".pdf": _pdf, ".docx": _docx, ".pptx": _pptx}
    if suffix not in readers:
        raise DocumentError(f"{name}: {suffix or 'this'} files are not read in parts.")
    try:
        yield from readers[suffix](name, data, settings)
    except DocumentError:
        raise
    except GeneratorExit:
        raise
    except Exception as exc:  # each parser raises its own types for damaged files
        raise DocumentError(f"{name} could not be read as {suffix[1:].upper()} ({type(exc).__name__}: {exc}). "
                            "Is the file damaged or password-protected?") from exc


def extract_text(name: str, data: bytes) -> str:
    """The text of a PDF, DOCX, PPTX or text file, at most DEMO_DOCUMENT_MAX_CHARS characters of it."""
    return read_document(name, data).text


def read_document(name: str, data: bytes, settings: DocumentSettings | None = None) -> Extracted:
    """The text of a PDF, DOCX, PPTX or text file, read only up to the settings' limits (DocumentError past the
    limits that guard against decompression bombs, or when the file cannot be read)."""
    settings = settings or DocumentSettings.from_env()
    suffix = PurePath(name).suffix.lower()
    if suffix in (".pdf", ".docx", ".pptx"):
        budget = _TextBudget(settings.max_chars)
        parts = iter_parts(name, data, settings)
        for part in parts:
            if isinstance(part, Cut):
                budget.cut = part.reason
                break
            text = f"[{part.location}]\n{part.text}" if part.labelled else part.text
            if not budget.add(text, part.separator):
                break
        parts.close()  # reading stops here: the rest of the file is not parsed
        if suffix == ".pdf" and not budget.size:
            raise DocumentError("the PDF has no text layer (a scan?); text recognition is not available here.")
        return budget.result()
    if suffix in TEXT_SUFFIXES or not suffix:
        return _cut_text(decode_text(name, data), settings.max_chars)
    raise DocumentError(f"{name}: {suffix or 'this'} files are not supported. Upload PDF, DOCX, PPTX or a text file.")


def _cut_text(text: str, limit: int) -> Extracted:
    if len(text) > limit:
        text = text.strip()  # count (and keep) only what shows
    if len(text) <= limit:
        return Extracted(text)
    return Extracted(text[:limit], f"cut to the first {limit:,} of {len(text):,} characters to fit the context")


def decode_text(name: str, data: bytes, declared: str | None = None) -> str:
    """Text in the declared encoding if it fits, else UTF-8 if it fits, else whatever charset detection finds."""
    if not data:
        return ""
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentError(f"{name} looks like a binary file, not text.")
    for encoding in (declared, "utf-8-sig"):
        if encoding:
            try:
                return data.decode(encoding)
            except (UnicodeDecodeError, LookupError):
                pass
    match = from_bytes(data).best()
    if match is None:
        raise DocumentError(f"{name}: the text encoding could not be recognised.")
    return str(match)


def _over_limit(name: str, what: str, variable: str) -> DocumentError:
    return DocumentError(f"{name}: {what}. The limit guards against files built to exhaust memory (decompression "
                         f"bombs); if the file is genuine, an administrator can raise it with {variable}.")


# Stored and deflated are the only methods Office files use (ECMA-376 part 2); refusing the others also keeps out
# bzip2 and LZMA, which zipfile decompresses in unbounded steps.
_OFFICE_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
# Only big parts are held to the ratio: a small part is harmless however tightly it packs.
_RATIO_CHECKED_FROM = 1 * MB


def check_office_zip(name: str, data: bytes, settings: DocumentSettings) -> None:
    """Refuse a DOCX/PPTX (a zip file) whose central directory declares more than the limits, before any part is
    unpacked. The declared sizes can be trusted: zipfile stops unpacking a part at its declared size."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        parts = archive.infolist()
    if len(parts) > settings.max_parts:
        raise _over_limit(name, f"it holds {len(parts):,} parts, more than the {settings.max_parts:,} allowed",
                          "DEMO_DOCUMENT_MAX_PARTS")
    for part in parts:
        _check_part(name, part, settings)
    total = sum(part.file_size for part in parts)
    if total > settings.max_unpacked_mb * MB:
        raise _over_limit(name, f"its parts unpack to {total / MB:,.1f} MB, more than the {settings.max_unpacked_mb:,}"
                          " MB allowed for one document", "DEMO_DOCUMENT_MAX_UNPACKED_MB")


def _check_part(name: str, part: zipfile.ZipInfo, settings: DocumentSettings) -> None:
    if part.compress_type not in _OFFICE_ZIP_METHODS:
        raise DocumentError(f"{name} is not a valid Office file: its part {part.filename} uses zip compression "
                            f"method {part.compress_type}, and Office files only use stored or deflated parts.")
    if part.file_size > settings.max_part_mb * MB:
        raise _over_limit(name, f"its part {part.filename} unpacks to {part.file_size / MB:,.1f} MB, more than the "
                          f"{settings.max_part_mb:,} MB allowed for one part", "DEMO_DOCUMENT_MAX_PART_MB")
    ratio = part.file_size / max(part.compress_size, 1)
    if part.file_size > _RATIO_CHECKED_FROM and ratio > settings.max_compression_ratio:
        raise _over_limit(name, f"its part {part.filename} is compressed {ratio:,.0f} to 1, more than the "
                          f"{settings.max_compression_ratio:,} to 1 allowed", "DEMO_DOCUMENT_MAX_COMPRESSION_RATIO")


# pypdf's own decompression limits (75 MB per stream by default), all lowered to our part limit for one read.
_PYPDF_OUTPUT_LIMITS = (
    "maximum_declared_stream_length", "array_based_stream_maximum_output_length", "zlib_maximum_output_length",
    "lzw_maximum_output_length", "run_length_maximum_output_length", "brotli_maximum_output_length",
    "jbig2_maximum_output_length", "image_maximum_buffer_size",
)


def _pypdf_limits(max_bytes: int) -> AbstractContextManager[object]:
    """pypdf's decompression limits set to `max_bytes` for the current context (thread) only."""
    import pypdf

    known = {field for field in _PYPDF_OUTPUT_LIMITS if hasattr(pypdf.get_configuration(), field)}
    return pypdf.apply_configuration(None, **{field: max_bytes for field in known})


def _pdf(name: str, data: bytes, settings: DocumentSettings) -> Iterator[Part | Cut]:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    try:
        with _pypdf_limits(settings.max_part_mb * MB):
            yield from _pdf_pages(name, PdfReader(io.BytesIO(data)), settings)
    except LimitReachedError as exc:
        raise _over_limit(name, f"it goes past a safety limit of the PDF reader ({exc}); a compressed stream in "
                          f"it may unpack to more than the {settings.max_part_mb:,} MB allowed for one part",
                          "DEMO_DOCUMENT_MAX_PART_MB") from exc


def _pdf_pages(name: str, reader: PdfReader, settings: DocumentSettings) -> Iterator[Part | Cut]:
    """Page by page. pypdf keeps every stream it has unpacked for the life of the reader, so what the pages unpack
    is added up and held to the limit for a whole document."""
    if reader.is_encrypted:
        raise DocumentError("the PDF is password-protected.")
    pages = reader.pages
    unpacked = 0
    for number, page in enumerate(pages, 1):
        if number > settings.max_pdf_pages:
            yield Cut(f"only the first {settings.max_pdf_pages:,} of {len(pages):,} pages were read "
                      "(DEMO_DOCUMENT_MAX_PDF_PAGES)")
            return
        contents = page.get_contents()  # unpacked here once; extract_text reuses pypdf's copy
        unpacked += len(contents.get_data()) if contents is not None else 0
        if unpacked > settings.max_unpacked_mb * MB:
            raise _over_limit(name, f"its first {number:,} pages unpack to {unpacked / MB:,.1f} MB, more than the "
                              f"{settings.max_unpacked_mb:,} MB allowed for one document",
                              "DEMO_DOCUMENT_MAX_UNPACKED_MB")
        text = (page.extract_text() or "").strip()
        if text:
            yield Part(f"page {number}", text, labelled=True)


def _docx(name: str, data: bytes, settings: DocumentSettings) -> Iterator[Part | Cut]:
    """Paragraphs and tables in document order, each under the heading it follows."""
    from docx import Document
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    check_office_zip(name, data, settings)
    document = Document(io.BytesIO(data))
    # Heading styles by id, looked up once: python-docx finds a paragraph's style by an XPath search over all the
    # styles, which a file of thousands of styles and paragraphs turns into minutes.
    headings = {style.style_id for style in document.styles
                if (style.name or "").startswith(("Heading", "Title")) and style.style_id}
    heading = ""
    for number, block in enumerate(document.iter_inner_content(), 1):  # paragraphs and tables in document order
        where = heading or f"paragraph {number}"  # before the first heading: by its place
        if isinstance(block, Paragraph):
            text = block.text
            if not text.strip():
                continue
            if block._p.style in headings:  # the paragraph's own style id, read from its XML without a search
                heading = where = text.strip()[:200]
            yield Part(where, text)
        elif isinstance(block, Table):
            for index, row in enumerate(block.rows):  # a table is one block, its rows on their own lines
                yield Part(where, " | ".join(cell.text.strip() for cell in row.cells), "\n" if index else "\n\n")


def _pptx(name: str, data: bytes, settings: DocumentSettings) -> Iterator[Part | Cut]:
    from pptx import Presentation

    check_office_zip(name, data, settings)
    presentation = Presentation(io.BytesIO(data))
    for number, slide in enumerate(presentation.slides, 1):
        texts: list[str] = []
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                texts.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                texts.extend(" | ".join(cell.text for cell in row.cells) for row in shape.table.rows)
        yield Part(f"slide {number}", "\n".join(texts), labelled=True)


def document_attachment(name: str, data: bytes) -> Attachment:
    """An uploaded file as a message attachment: its text, cut to the per-document budget with a visible note."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise DocumentError(f"{name} is {len(data) / 1e6:.1f} MB; files up to {MAX_UPLOAD_BYTES // 2**20} MB "
                            "can be uploaded.")
    extracted = read_document(name, data)
    text = extracted.text if extracted.cut else extracted.text.strip()  # a cut text starts trimmed already
    if not text.strip():
        raise DocumentError(f"{name} contains no text.")
    note = f"{extracted.cut}; the whole file is in the Python tool's folder" if extracted.cut else ""
    return Attachment(kind="document", name=PurePath(name).name, text=text, note=note)
