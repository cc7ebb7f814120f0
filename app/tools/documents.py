"""Text from uploaded files (and fetched PDFs): pdf, docx with tables, pptx, and text files of any encoding."""

from __future__ import annotations

import io
from pathlib import PurePath

from charset_normalizer import from_bytes

from app.config import DocumentSettings
from app.conversation import Attachment

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
TEXT_SUFFIXES = {
    ".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".ini",
    ".xml", ".html", ".htm", ".log", ".py", ".js", ".ts", ".java", ".c", ".h", ".cpp", ".go", ".rs", ".sh", ".sql",
}
UPLOAD_TYPES = sorted({"pdf", "docx", "pptx", *(suffix.lstrip(".") for suffix in TEXT_SUFFIXES)})


class DocumentError(ValueError):
    """A file that cannot be read; the message says why and what to do."""


def extract_text(name: str, data: bytes) -> str:
    suffix = PurePath(name).suffix.lower()
    try:
        if suffix == ".pdf":
            return _pdf(data)
        if suffix == ".docx":
            return _docx(data)
        if suffix == ".pptx":
            return _pptx(data)
    except DocumentError:
        raise
    except Exception as exc:  # each parser raises its own types for damaged files
        raise DocumentError(f"{name} could not be read as {suffix[1:].upper()} ({type(exc).__name__}: {exc}). "
                            "Is the file damaged or password-protected?") from exc
    if suffix in TEXT_SUFFIXES or not suffix:
        return decode_text(name, data)
    raise DocumentError(f"{name}: {suffix or 'this'} files are not supported. Upload PDF, DOCX, PPTX or a text file.")


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


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise DocumentError("the PDF is password-protected.")
    pages = [(page.extract_text() or "").strip() for page in reader.pages]
    text = "\n\n".join(f"[page {i}]\n{page}" for i, page in enumerate(pages, 1) if page)
    if not text:
        raise DocumentError("the PDF has no text layer (a scan?); text recognition is not available here.")
    return text


def _docx(data: bytes) -> str:
    from docx import Document
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = Document(io.BytesIO(data))
    parts: list[str] = []
    for block in document.iter_inner_content():  # paragraphs and tables in document order
        if isinstance(block, Paragraph) and block.text.strip():
            parts.append(block.text)
        elif isinstance(block, Table):
            rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in block.rows]
            parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _pptx(data: bytes) -> str:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(data))
    slides: list[str] = []
    for number, slide in enumerate(presentation.slides, 1):
        texts: list[str] = []
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                texts.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                texts.extend(" | ".join(cell.text for cell in row.cells) for row in shape.table.rows)
        slides.append(f"[slide {number}]\n" + "\n".join(texts))
    return "\n\n".join(slides)


def document_attachment(name: str, data: bytes) -> Attachment:
    """An uploaded file as a message attachment: its text, cut to the per-document budget with a visible note."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise DocumentError(f"{name} is {len(data) / 1e6:.1f} MB; files up to {MAX_UPLOAD_BYTES // 2**20} MB "
                            "can be uploaded.")
    text = extract_text(name, data).strip()
    if not text:
        raise DocumentError(f"{name} contains no text.")
    limit = DocumentSettings.from_env().max_chars
    note = ""
    if len(text) > limit:
        note = f"cut to the first {limit:,} of {len(text):,} characters to fit the context; the whole file is in " \
               "the Python tool's folder"
        text = text[:limit]
    return Attachment(kind="document", name=PurePath(name).name, text=text, note=note)
