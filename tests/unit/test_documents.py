"""Document upload: real small PDF, DOCX and PPTX files made in the test, text files in several encodings."""

from __future__ import annotations

import io

import pytest

from app.domain.conversation import Message
from app.tools.documents import DocumentError, document_attachment, extract_text
from tests.helpers import pdf_bytes


def docx_bytes() -> bytes:
    from docx import Document

    document = Document()
    document.add_paragraph("Quarterly report")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Region", "Sales"
    table.cell(1, 0).text, table.cell(1, 1).text = "North", "1200"
    document.add_paragraph("End of report")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def pptx_bytes() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Roadmap"
    slide.placeholders[1].text = "Ship the demo"
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def test_pdf():
    assert "Tides are caused by the Moon." in extract_text("paper.pdf", pdf_bytes("Tides are caused by the Moon."))


def test_docx_keeps_tables_in_order():
    text = extract_text("report.docx", docx_bytes())
    assert text == "Quarterly report\n\nRegion | Sales\nNorth | 1200\n\nEnd of report"


def test_pptx():
    assert extract_text("deck.pptx", pptx_bytes()) == "[slide 1]\nRoadmap\nShip the demo"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "cp1252"])
def test_text_in_any_encoding(encoding):
    # (Detection from bytes alone is a guess: a short text whose letters mean different things in cp1250 and
    # cp1252 can come out wrong. These letters read the same in both.)
    text = "Name,Stadt,Größe\nMüller,München,1.82\nJosé,Málaga,1.75\nWeiß,Köln,1.68\n" * 3
    assert extract_text("prices.csv", text.encode(encoding)).replace("\r", "") == text


def test_long_documents_are_cut_with_a_visible_note(monkeypatch):
    monkeypatch.setenv("DEMO_DOCUMENT_MAX_CHARS", "100")
    attachment = document_attachment("long.txt", ("word " * 100).encode())
    assert len(attachment.text) == 100 and "cut to the first 100 of 499 characters" in attachment.note
    message = Message("user", "Summarise this", attachments=[attachment])
    assert message.to_openai()["content"].startswith('Summarise this\n\n<document name="long.txt" (cut to the first')


@pytest.mark.parametrize(
    "name, data, error",
    [
        ("broken.pdf", b"%PDF-1.4 not really", "could not be read as PDF"),
        ("broken.docx", b"PK\x03\x04 nope", "could not be read as DOCX"),
        ("program.exe", b"MZ\x90\x00", "not supported"),
        ("binary.txt", b"\x00\x01\x02\x03" * 10, "binary file"),
        ("empty.txt", b"   ", "contains no text"),
        ("huge.txt", b"x" * (21 * 1024 * 1024), "files up to 20 MB"),
    ],
)
def test_bad_files_get_clear_errors(name, data, error):
    with pytest.raises(DocumentError, match=error):
        document_attachment(name, data)
