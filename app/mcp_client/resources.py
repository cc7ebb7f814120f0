"""MCP resources as attachments of the user's next message, the way uploaded files are (app/agent/attachments.py): a
text resource (or a PDF, Word or PowerPoint one) becomes a document whose text the model reads; a picture goes
through app/domain/media.py like an uploaded one; any other binary resource is refused with a reason. The upload limits
apply, checked on the declared size before reading and on the base64 length before decoding.

Resource templates (URIs with {variables}) are offered when every variable is a plain `{name}`; the values are
percent-encoded into the URI. No Streamlit and no I/O here.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from mcp import types

from app.config import DocumentSettings
from app.domain.conversation import Attachment
from app.domain.media import ImageError, prepare_image
from app.tools.documents import MAX_UPLOAD_BYTES, DocumentError, read_document

MAX_CONTENTS = 10  # contents of one read (a server may answer one URI with many)
MAX_VARIABLES = 10  # of a template offered as a form
MAX_VALUE_CHARS = 1000
_DOCUMENT_SUFFIXES = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
}
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/yaml", "application/x-yaml",
               "application/toml", "application/javascript", "application/sql")
_SIMPLE_VARIABLE = re.compile(r"\{([A-Za-z0-9_]{1,64})\}")


class ResourceError(ValueError):
    """A resource that cannot be attached; the message says why."""


@dataclass(frozen=True)
class Attached:
    """A read resource as attachments, and a note for each of its contents that could not be used."""

    attachments: list[Attachment]
    notes: list[str]


def check_declared_size(resource: types.Resource) -> None:
    """ResourceError when the listing already says the resource is larger than an upload may be."""
    if resource.size is not None and resource.size > MAX_UPLOAD_BYTES:
        raise ResourceError(_too_large(resource.title or resource.name, resource.size))


def attachments_of(result: types.ReadResourceResult, name: str) -> Attached:
    """The contents of a read resource as attachments named after `name` (the resource's title or name).
    ResourceError when none of them can be attached (the notes say why)."""
    contents = result.contents
    if not contents:
        raise ResourceError(f"{name}: the server sent no contents.")
    notes = [f"{len(contents) - MAX_CONTENTS} more contents were left out (at most {MAX_CONTENTS})."] \
        if len(contents) > MAX_CONTENTS else []
    attachments: list[Attachment] = []
    for index, content in enumerate(contents[:MAX_CONTENTS]):
        label = name if len(contents) == 1 else f"{name} ({index + 1}: {content.uri})"
        try:
            attachments.append(_attachment(content, label))
        except ResourceError as exc:
            notes.append(str(exc))
    if not attachments:
        raise ResourceError(" ".join(notes))
    return Attached(attachments, notes)


def _attachment(content: types.TextResourceContents | types.BlobResourceContents, name: str) -> Attachment:
    if isinstance(content, types.TextResourceContents):
        size = len(content.text.encode("utf-8", "surrogatepass"))
        if size > MAX_UPLOAD_BYTES:
            raise ResourceError(_too_large(name, size))
        return _document(name, content.text)
    mime = (content.mime_type or "application/octet-stream").split(";")[0].strip().lower()
    if len(content.blob) * 3 // 4 > MAX_UPLOAD_BYTES:  # judged before decoding: the decoded bytes are smaller
        raise ResourceError(_too_large(name, len(content.blob) * 3 // 4))
    try:
        data = base64.b64decode(content.blob, validate=True)
    except (binascii.Error, ValueError):
        raise ResourceError(f"{name}: its data is not valid base64.") from None
    if mime.startswith("image/"):
        try:
            return Attachment(kind="image", name=name, data=prepare_image(data, name).data)
        except ImageError as exc:
            raise ResourceError(str(exc)) from None
    if mime in _DOCUMENT_SUFFIXES or mime.startswith(_TEXT_TYPES):
        suffix = _DOCUMENT_SUFFIXES.get(mime, ".txt")
        try:
            extracted = read_document(f"resource{suffix}", data)
        except DocumentError as exc:
            raise ResourceError(f"{name}: {str(exc).removeprefix(f'resource{suffix}').lstrip(' :')}") from None
        return _document(name, extracted.text, extracted.cut)
    raise ResourceError(f"{name} is a binary resource ({mime}, {len(data):,} bytes): only text, pictures and PDF, "
                        "Word or PowerPoint documents can be attached.")


def _document(name: str, text: str, cut: str = "") -> Attachment:
    """The text as a document attachment, cut to the per-document budget with a visible note."""
    limit = DocumentSettings.from_env().max_chars
    if not cut and len(text) > limit:
        text, cut = text[:limit], f"cut to the first {limit:,} of {len(text):,} characters to fit the context"
    if not text.strip():
        raise ResourceError(f"{name} contains no text.")
    return Attachment(kind="document", name=name, text=text, note=cut)


def _too_large(name: str, size: int) -> str:
    return (f"{name} is {size / 1e6:.1f} MB; resources up to {MAX_UPLOAD_BYTES // 2**20} MB can be attached, as "
            "uploads.")


# ----- templates ------------------------------------------------------------------------------------------------

def template_variables(template: types.ResourceTemplate) -> tuple[str, ...] | None:
    """The variables of a template whose every expression is a plain {name} (at most MAX_VARIABLES), in order and
    each once; None for one this form cannot fill ({+path}, {?query}, ...)."""
    uri = template.uri_template
    names = _SIMPLE_VARIABLE.findall(uri)
    if "{" in _SIMPLE_VARIABLE.sub("", uri) or "}" in _SIMPLE_VARIABLE.sub("", uri) or len(names) > MAX_VARIABLES:
        return None
    return tuple(dict.fromkeys(names))


def expand(template: types.ResourceTemplate, values: Mapping[str, str]) -> str:
    """The URI of `template` with every variable replaced by its value, percent-encoded (a value cannot add a path
    or a query). ResourceError when a value is missing or too long, or the template is not a simple one."""
    names = template_variables(template)
    if names is None:
        raise ResourceError(f"the template {template.uri_template} uses expressions that cannot be filled in here.")
    missing = [name for name in names if not str(values.get(name) or "").strip()]
    if missing:
        raise ResourceError(f"fill in {', '.join(repr(name) for name in missing)}.")
    if any(len(str(values[name])) > MAX_VALUE_CHARS for name in names):
        raise ResourceError(f"a value may be at most {MAX_VALUE_CHARS:,} characters long.")
    return _SIMPLE_VARIABLE.sub(lambda match: quote(str(values[match.group(1)]).strip(), safe=""),
                                template.uri_template)
