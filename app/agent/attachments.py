"""What a user sends with a message: its text and the files attached to it, turned into one user Message.

Pictures are checked and made safe (app/domain/media.py); one that cannot be used refuses the whole message. Other files
become document attachments (app/tools/documents.py); one that cannot be read stays on the message as a visible
note, and the rest of the message still goes out. No Streamlit here: the pages hand over the message box's value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.domain.conversation import Attachment, Message
from app.domain.media import IMAGE_TYPES, check_message_images, prepare_image
from app.tools.documents import UPLOAD_TYPES, DocumentError, document_attachment

ATTACHMENT_TYPES = [*IMAGE_TYPES, *UPLOAD_TYPES]  # what a page's message box accepts: pictures and documents

Upload = tuple[str, bytes]  # an attached file: its name and its bytes
# Told of every document that was read (the All Tools page copies it to the Python tool's folder); what it returns
# is ignored. A DocumentError it raises makes the document a note, like one that could not be read.
OnUpload = Callable[[str, bytes], object]
# Reads an uploaded document into an attachment (DocumentError when it cannot be read): by default its text, cut to
# the prompt's budget; a page with knowledge passes app/knowledge/conversation.py's LongDocuments, which makes a long
# one searchable instead.
DocumentReader = Callable[[str, bytes], Attachment]


def user_message(text: str, files: Sequence[Upload] = (), on_upload: OnUpload | None = None,
                 ready: Sequence[Attachment] = (), read: DocumentReader = document_attachment) -> Message | None:
    """The user's message from the text typed and the files attached, or None when there is nothing to send.
    `ready`: attachments already made (an MCP server's resources, app/mcp_client/resources.py), sent along.

    Raises ImageError (and nothing is sent) when a picture cannot be used or the pictures are too many or too
    large together. A document that cannot be read becomes an attachment with no text and a "not read: ..." note.
    Pictures come first among the attachments, then the documents, each in the order given (uploads first)."""
    pictures = [Attachment(kind="image", name=name, data=prepare_image(data, name).data)
                for name, data in files if is_image_name(name)]
    pictures += [attachment for attachment in ready if attachment.kind == "image"]
    check_message_images([picture.data for picture in pictures])
    attachments: list[Attachment] = list(pictures)
    for name, data in files:
        if not is_image_name(name):
            attachments.append(_document(name, data, on_upload, read))
    attachments += [attachment for attachment in ready if attachment.kind != "image"]
    if not text.strip() and not attachments:
        return None
    return Message(role="user", content=text.strip(), attachments=attachments)


def is_image_name(name: str) -> bool:
    """Whether a file is sent as a picture, judged by its name as the message box's file filter does."""
    return name.rsplit(".", 1)[-1].lower() in IMAGE_TYPES


def _document(name: str, data: bytes, on_upload: OnUpload | None, read: DocumentReader) -> Attachment:
    try:
        attachment = read(name, data)
        if on_upload is not None:
            on_upload(name, data)
    except DocumentError as exc:
        return Attachment(kind="document", name=name, note=f"not read: {exc}")
    return attachment
