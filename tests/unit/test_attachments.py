"""app/agent/attachments.py: the text and files of the message box become one user Message, without Streamlit. Pictures
are made with Pillow, documents with reportlab and python-docx."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from app.agent.attachments import ATTACHMENT_TYPES, is_image_name, user_message
from app.domain.media import ImageError
from app.tools.documents import DocumentError
from tests.helpers import pdf_bytes
from tests.unit.test_documents import docx_bytes


def picture(fmt: str = "PNG", size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, "teal").save(out, fmt)
    return out.getvalue()


class Uploads:
    """An on_upload callback that remembers what it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def __call__(self, name: str, data: bytes) -> None:
        self.seen.append((name, data))


def test_text_alone_is_a_user_message_with_its_text_trimmed():
    message = user_message("  What is the tallest lighthouse?\n")
    assert message is not None and message.role == "user"
    assert message.content == "What is the tallest lighthouse?" and message.attachments == []


@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_nothing_to_send_is_none(text):
    assert user_message(text, []) is None


def test_a_picture_is_checked_and_re_encoded():
    message = user_message("What colour is this?", [("Photo.PNG", picture())])
    assert message is not None and message.content == "What colour is this?"
    [image] = message.images
    assert image.kind == "image" and image.name == "Photo.PNG"
    decoded = Image.open(io.BytesIO(image.data))
    assert decoded.format == "PNG" and decoded.size == (64, 48)
    assert decoded.getpixel((10, 10)) == (0, 128, 128)


def test_a_picture_alone_is_sent_without_text():
    message = user_message("", [("photo.jpg", picture("JPEG"))])
    assert message is not None and message.content == ""
    assert Image.open(io.BytesIO(message.images[0].data)).format == "JPEG"  # a JPEG stays a JPEG


def test_a_broken_picture_refuses_the_whole_message_and_no_document_is_kept():
    uploads = Uploads()
    with pytest.raises(ImageError, match="broken.png"):
        user_message("Look at these", [("notes.txt", b"shopping list"), ("broken.png", b"\x89PNG\r\n\x1a\nnot really")],
                     uploads)
    assert uploads.seen == []  # pictures are checked before any document is handed on


def test_too_many_pictures_refuse_the_message(monkeypatch):
    monkeypatch.setenv("DEMO_IMAGE_MAX_PER_MESSAGE", "1")
    with pytest.raises(ImageError, match="at most 1 images"):
        user_message("Compare", [("a.png", picture()), ("b.png", picture())])


def test_documents_become_attachments_with_their_text_and_are_handed_on():
    pdf, docx, notes = pdf_bytes("Tides are caused by the Moon."), docx_bytes(), b"Meeting at noon\n"
    uploads = Uploads()
    message = user_message("Summarise", [("paper.pdf", pdf), ("report.docx", docx), ("notes.txt", notes)], uploads)
    assert message is not None
    assert [(a.kind, a.name) for a in message.attachments] == [
        ("document", "paper.pdf"), ("document", "report.docx"), ("document", "notes.txt")]
    paper, report, text = message.attachments
    assert "Tides are caused by the Moon." in paper.text
    assert report.text == "Quarterly report\n\nRegion | Sales\nNorth | 1200\n\nEnd of report"
    assert text.text == "Meeting at noon" and not text.note
    assert uploads.seen == [("paper.pdf", pdf), ("report.docx", docx), ("notes.txt", notes)]


def test_pictures_come_before_documents():
    message = user_message("", [("notes.md", b"# Plan"), ("chart.png", picture())])
    assert message is not None
    assert [(a.kind, a.name) for a in message.attachments] == [("image", "chart.png"), ("document", "notes.md")]


def test_an_unreadable_document_is_a_note_and_the_rest_still_goes_out():
    uploads = Uploads()
    files = [("damaged.pdf", b"%PDF-1.4\nthis is not a PDF body"), ("empty.txt", b"   \n"), ("notes.txt", b"kept")]
    message = user_message("What do these say?", files, uploads)
    assert message is not None and message.content == "What do these say?"
    damaged, empty, notes = message.attachments
    assert damaged.kind == "document" and damaged.text == ""
    assert damaged.note.startswith("not read: damaged.pdf could not be read as PDF")
    assert empty.text == "" and empty.note == "not read: empty.txt contains no text."
    assert notes.text == "kept"
    assert uploads.seen == [("notes.txt", b"kept")]  # only what was read is handed on


def test_an_unreadable_document_alone_is_still_sent():
    message = user_message("", [("damaged.docx", b"PK not a zip")])
    assert message is not None and message.content == ""
    [attachment] = message.attachments
    assert attachment.note.startswith("not read: damaged.docx")


def test_a_document_the_upload_callback_refuses_is_a_note():
    def full(name: str, data: bytes) -> None:
        raise DocumentError("the uploads of this session would exceed 1 MB")

    message = user_message("", [("notes.txt", b"kept")], full)
    assert message is not None
    [attachment] = message.attachments
    assert attachment.text == "" and attachment.note == "not read: the uploads of this session would exceed 1 MB"


def test_pictures_are_told_apart_by_name_as_the_message_box_filters_them():
    assert is_image_name("Photo.JPEG") and is_image_name("a.b.webp")
    assert not is_image_name("report.pdf") and not is_image_name("png.txt")
    assert {"png", "jpg", "pdf", "docx", "txt"} <= set(ATTACHMENT_TYPES)
