"""Limits on uploaded documents: zip bombs in DOCX/PPTX are refused from the zip's directory before anything is
unpacked, extraction stops at the character limit, and PDFs are read page by page under tighter pypdf limits."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
import zlib
from types import SimpleNamespace

import pytest

from app.tools.documents import DocumentError, document_attachment, read_document
from tests.unit.test_documents import docx_bytes, pptx_bytes

PARAGRAPH = b"<w:p><w:r><w:t>" + b"a" * 10_000 + b"</w:t></w:r></w:p>"


def bomb_docx(characters: int) -> bytes:
    """A DOCX whose word/document.xml holds `characters` letters in paragraphs of 10,000: a few hundred KB that
    python-docx would unpack to hundreds of MB. Streamed into the zip, so making it needs little memory."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes()))
    head, tail = source.read("word/document.xml").split(b"<w:body>", 1)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                out.writestr(info, source.read(info))
        with out.open("word/document.xml", "w", force_zip64=True) as xml:
            xml.write(head + b"<w:body>")
            for _ in range(characters // 10_000):
                xml.write(PARAGRAPH)
            xml.write(tail)
    return buffer.getvalue()


def rezip(data: bytes, method: int) -> bytes:
    """The same Office file with every part compressed by `method`."""
    source = zipfile.ZipFile(io.BytesIO(data))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as out:
        for info in source.infolist():
            out.writestr(info.filename, source.read(info))
    return buffer.getvalue()


def pdf_pages(contents: list[bytes]) -> bytes:
    """A PDF with one page per content stream (each deflated), its text in Helvetica."""
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(contents)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(contents)),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, content in enumerate(contents):
        stream = zlib.compress(content)
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * i))
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream))
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def text_page(text: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode()


# ----- DOCX / PPTX: the zip's directory is checked before python-docx / python-pptx unpack anything -------------

def test_a_zip_bomb_docx_is_refused_with_little_memory():
    bomb = bomb_docx(60_000_000)  # 60 M characters of text in about 110 KB
    assert len(bomb) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(DocumentError) as caught:
            document_attachment("bomb.docx", bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20, f"{peak / 2**20:.0f} MB allocated while refusing the file"
    assert str(caught.value).startswith("bomb.docx: its part word/document.xml unpacks to 57.4 MB, more than the "
                                        "50 MB allowed for one part.")
    assert "an administrator can raise it with DEMO_DOCUMENT_MAX_PART_MB" in str(caught.value)


@pytest.mark.parametrize(
    "name, make, variable, value, message",
    [
        ("bomb.docx", lambda: bomb_docx(3_000_000), "DEMO_DOCUMENT_MAX_COMPRESSION_RATIO", "",
         r"its part word/document.xml is compressed [\d,]+ to 1, more than the 100 to 1 allowed"),
        ("bomb.docx", lambda: bomb_docx(3_000_000), "DEMO_DOCUMENT_MAX_PART_MB", "2",
         "its part word/document.xml unpacks to 2.9 MB, more than the 2 MB allowed for one part"),
        ("report.docx", docx_bytes, "DEMO_DOCUMENT_MAX_UNPACKED_MB", "0",
         r"its parts unpack to 0.\d MB, more than the 0 MB allowed for one document"),
        ("report.docx", docx_bytes, "DEMO_DOCUMENT_MAX_PARTS", "5", r"it holds \d+ parts, more than the 5 allowed"),
        ("deck.pptx", pptx_bytes, "DEMO_DOCUMENT_MAX_PARTS", "5", r"it holds \d+ parts, more than the 5 allowed"),
        ("deck.pptx", pptx_bytes, "DEMO_DOCUMENT_MAX_UNPACKED_MB", "0", "more than the 0 MB allowed"),
    ],
)
def test_each_office_limit_is_a_clear_error_naming_its_setting(name, make, variable, value, message, monkeypatch):
    monkeypatch.setenv(variable, value)
    with pytest.raises(DocumentError, match=message) as caught:
        document_attachment(name, make())
    assert str(caught.value).startswith(f"{name}: ") and str(caught.value).endswith(f"raise it with {variable}.")


def test_limits_can_be_raised(monkeypatch):
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_COMPRESSION_RATIO", "2000")
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_CHARS", "50")
    attachment = document_attachment("bomb.docx", bomb_docx(3_000_000))
    assert attachment.text == "a" * 50


def test_office_files_may_only_use_stored_or_deflated_parts():
    assert read_document("report.docx", rezip(docx_bytes(), zipfile.ZIP_STORED)).text.startswith("Quarterly report")
    with pytest.raises(DocumentError, match="uses zip compression method 12, and Office files only use stored"):
        document_attachment("report.docx", rezip(docx_bytes(), zipfile.ZIP_BZIP2))


def test_docx_reading_stops_at_the_character_limit(monkeypatch):
    from docx import Document
    from docx.text.paragraph import Paragraph

    document = Document()
    paragraphs = [f"Paragraph {number} of a long report." for number in range(2000)]
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    read = []
    original = Paragraph.text
    monkeypatch.setattr(Paragraph, "text", property(lambda p: read.append(1) or original.fget(p), original.fset))
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_CHARS", "100")
    attachment = document_attachment("long.docx", buffer.getvalue())
    assert attachment.text == "\n\n".join(paragraphs)[:100]
    assert attachment.note == ("cut to the first 100 characters to fit the context (reading stopped there); "
                               "the whole file is in the Python tool's folder")
    assert len(read) < 10, f"{len(read)} paragraphs were read for 100 characters"


def test_pptx_reading_stops_at_the_character_limit(monkeypatch):
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_CHARS", "20")
    extracted = read_document("deck.pptx", pptx_bytes())
    assert extracted.text == "[slide 1]\nRoadmap\nSh" and "cut to the first 20 characters" in extracted.cut


# ----- PDF: pages are read one at a time, under the part limit for every decompressed stream --------------------

def test_pdf_reading_stops_at_the_character_limit(monkeypatch):
    from pypdf import PageObject

    read = []
    original = PageObject.extract_text
    monkeypatch.setattr(PageObject, "extract_text", lambda page, *a, **k: read.append(1) or original(page, *a, **k))
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_CHARS", "60")
    pdf = pdf_pages([text_page(f"Page {number} says something.") for number in range(1, 51)])
    extracted = read_document("long.pdf", pdf)
    assert extracted.text == "[page 1]\nPage 1 says something.\n\n[page 2]\nPage 2 says someth"
    assert "cut to the first 60 characters" in extracted.cut
    assert len(read) == 2


def test_only_the_first_pages_of_a_long_pdf_are_read(monkeypatch):
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_PDF_PAGES", "3")
    attachment = document_attachment("long.pdf", pdf_pages([text_page(f"Page {n}") for n in range(1, 6)]))
    assert attachment.text == "[page 1]\nPage 1\n\n[page 2]\nPage 2\n\n[page 3]\nPage 3"
    assert attachment.note == ("only the first 3 of 5 pages were read (DEMO_DOCUMENT_MAX_PDF_PAGES); "
                               "the whole file is in the Python tool's folder")


def test_a_pdf_decompression_bomb_is_refused(monkeypatch):
    # 3 MB of spaces after the text deflate to about 3 KB; pypdf's own limit (75 MB) would let them through.
    bomb = pdf_pages([text_page("hello") + b" " * (3 * 2**20)])
    assert len(bomb) < 10_000 and "hello" in read_document("ok.pdf", bomb).text
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_PART_MB", "1")
    with pytest.raises(DocumentError, match=r"^bomb.pdf: it goes past a safety limit of the PDF reader .*"
                                            r"more than the 1 MB allowed for one part.*DEMO_DOCUMENT_MAX_PART_MB\.$"):
        document_attachment("bomb.pdf", bomb)


def test_what_the_pages_of_a_pdf_unpack_to_is_limited_for_the_whole_document(monkeypatch):
    # pypdf keeps every unpacked stream for the life of the reader: many pages under the part limit add up.
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_UNPACKED_MB", "1")
    pdf = pdf_pages([text_page(f"Page {n}") + b" " * 600_000 for n in range(1, 6)])
    with pytest.raises(DocumentError, match=r"^many.pdf: its first 2 pages unpack to 1.1 MB, more than the 1 MB "
                                            r"allowed for one document.*DEMO_DOCUMENT_MAX_UNPACKED_MB\.$"):
        document_attachment("many.pdf", pdf)


# ----- the chat shows the refusal on the attachment and sends the rest of the message --------------------------

def test_a_refused_upload_is_a_note_on_the_message():
    from app.frontends.streamlit.chat_page import user_message

    upload = SimpleNamespace(name="bomb.docx", getvalue=lambda: bomb_docx(60_000_000))
    message = user_message(SimpleNamespace(text="What is in this file?", files=[upload]))
    assert message is not None and message.content == "What is in this file?"
    [attachment] = message.attachments
    assert attachment.name == "bomb.docx" and not attachment.text
    assert attachment.note.startswith("not read: bomb.docx: its part word/document.xml unpacks to 57.4 MB")
