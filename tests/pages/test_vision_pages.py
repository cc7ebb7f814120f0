"""Pictures on the Chat and All Tools pages (AppTest): attached, shown, saved, seen by a vision model; a text-only
model's clear refusal and the text-only answer the user may choose; a file that is no picture sends nothing."""

from __future__ import annotations

import pytest

from app.storage import ConversationStore, open_database
from tests.engines.test_vision import png
from tests.helpers import ALL_TOOLS_PAGE, open_app


def send_picture(at, text: str, name: str = "red.png", data: bytes | None = None, key: str = "chat_input"):
    box = at.chat_input(key=key).upload(name, data if data is not None else png(), "image/png")
    box.set_value(text).run()
    assert not at.exception
    return at


def conversation(at, page: str = "chat"):
    return at.session_state[f"conversation/{page}"]


def sidebar_captions(at) -> list[str]:
    """The captions of the page and sidebar (the model's status is next to the model picker)."""
    return [caption.value for caption in at.caption] + [caption.value for caption in at.sidebar.caption]


def test_a_vision_model_gets_the_picture_which_shows_in_the_chat_and_is_saved(monkeypatch, tiny_vlm_dir, tmp_path):
    url = f"sqlite:///{tmp_path / 'conversations.db'}"
    monkeypatch.setenv("DEMO_DATABASE_URL", url)
    with open_app(monkeypatch, tiny_vlm_dir, temperature=0.0, max_new_tokens=6) as at:
        assert any(caption.startswith(":material/visibility: Sees images") for caption in sidebar_captions(at))
        send_picture(at, "What is this?")
        user, answer = at.chat_message
        assert user.name == "user" and [image.captions for image in user.image] == [["red.png"]]
        assert answer.name == "assistant" and not answer.error and "6 tokens" in answer.caption[0].value
        messages = conversation(at).messages
        assert len(messages[0].images) == 1 and messages[1].error is None
        # The picture is stored with the conversation, and so comes back after a refresh or a restart.
        database = ConversationStore(open_database(url))
        (entry,) = database.list("local", page="chat")
        assert database.get("local", entry.id).messages[0].images[0].data == messages[0].images[0].data


def test_a_text_only_model_says_it_cannot_see_and_answers_the_text_when_asked(monkeypatch, tiny_model_dir):
    with open_app(monkeypatch, tiny_model_dir, temperature=0.0, max_new_tokens=6) as at:
        assert any("Text only: cannot see images" in caption for caption in sidebar_captions(at))
        send_picture(at, "What is this?")
        error = at.chat_message[1].error[0].value
        assert "cannot see images" in error and "SmolVLM" in error
        assert [m.role for m in conversation(at).messages] == ["user", "assistant"]
        at.button(key="text_only/chat").click().run()
        assert not at.exception
        messages = conversation(at).messages
        assert [m.role for m in messages] == ["user", "assistant"] and messages[1].error is None
        assert messages[1].content and len(messages[0].images) == 1  # the picture stays, only the prompt left it out
        assert not [b for b in at.button if b.key == "text_only/chat"]


@pytest.mark.parametrize("name, data, problem", [
    ("broken.png", png()[:50], "damaged or incomplete"),
    ("notes.gif", b"this is text, not a picture", "is not a PNG, JPEG, WebP or GIF image"),
])
def test_a_file_that_is_no_usable_picture_sends_nothing_and_gives_the_text_back(monkeypatch, tiny_vlm_dir, name, data,
                                                                                problem):
    with open_app(monkeypatch, tiny_vlm_dir, max_new_tokens=4) as at:
        send_picture(at, "Describe my holiday photo", name=name, data=data)
        assert problem in at.error[0].value and at.error[0].value.startswith("**Not sent.**")
        assert at.code[0].value == "Describe my holiday photo"
        assert conversation(at).messages == [] and not at.chat_message


def test_all_tools_offers_plots_to_the_model_only_when_it_can_see(monkeypatch, tiny_model_dir, tiny_vlm_dir):
    with open_app(monkeypatch, tiny_model_dir, page=ALL_TOOLS_PAGE) as at:
        assert at.toggle(key="settings.all_tools.tool_images").disabled
    with open_app(monkeypatch, tiny_vlm_dir, page=ALL_TOOLS_PAGE) as at:
        assert not at.toggle(key="settings.all_tools.tool_images").disabled
