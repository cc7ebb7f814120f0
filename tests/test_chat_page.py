"""The Chat page through Streamlit's AppTest, on a real (tiny, then SmolLM2) model."""

from __future__ import annotations

import re
import threading
from contextlib import closing

import pytest

from app.agent import TextDelta, run_turn
from app.clients.base import GenerationParams
from app.conversation import Conversation, Message
from tests.helpers import open_app


@pytest.fixture
def app(monkeypatch, tiny_model_dir):
    with open_app(monkeypatch, tiny_model_dir, temperature=0.0, max_new_tokens=12) as at:
        yield at


def messages(at):
    return [(m.name, "".join(md.value for md in m.markdown), [c.value for c in m.caption]) for m in at.chat_message]


def send(at, text):
    at.chat_input(key="chat_input").set_value(text).run()
    assert not at.exception


def test_status_line_names_backend_model_and_device(app):
    assert any("transformers" in c.value and "cpu" in c.value for c in app.caption)


def test_send_streams_an_answer_with_metrics(app):
    send(app, "Hello there")
    (role1, text1, _), (role2, text2, captions) = messages(app)
    assert (role1, text1) == ("user", "Hello there")
    assert role2 == "assistant" and text2.strip()
    assert "12 tokens" in captions[0] and "tok/s" in captions[0] and "cut at max new tokens" in captions[0]


def test_a_next_turn_says_how_much_of_its_prompt_was_cached(app):
    send(app, "Hello there")
    assert "cached" not in messages(app)[1][2][0]
    send(app, "Tell me more")
    found = re.search(r"prompt (\d+) tokens · (\d+) cached", messages(app)[3][2][0])
    assert found and 0 < int(found[2]) < int(found[1])


def test_clear_empties_the_conversation(app):
    send(app, "Hello there")
    app.button(key="clear").click().run()
    assert messages(app) == []


def test_regenerate_replaces_the_last_answer(app):
    send(app, "Hello there")
    first = messages(app)
    app.button(key="regenerate").click().run()
    again = messages(app)
    assert len(again) == 2 and again[0] == first[0]
    assert again[1][1] == first[1][1]  # greedy: the same answer, not a second one appended


def test_edit_and_resend_the_last_message(app):
    send(app, "Hello there")
    edit_box = next(t for t in app.text_area if t.key and t.key.startswith("edit/chat/"))
    edit_box.set_value("Question number 2")
    app.button(key="resend").click().run()
    rows = messages(app)
    assert [r[:2][0] for r in rows] == ["user", "assistant"]
    assert rows[0][1] == "Question number 2"


def test_a_stopped_answer_is_kept_and_marked(app, tiny_client):
    conversation = Conversation([Message("user", "Hello there")])
    with closing(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=300),
                          cancel=threading.Event())) as events:
        next(e for e in events if isinstance(e, TextDelta))
    app.session_state["conversation/chat"] = conversation
    app.run()
    (_, _, _), (role, text, captions) = messages(app)
    assert role == "assistant" and text
    assert captions[0].startswith(":orange[Stopped]")


def test_a_bad_model_path_is_an_actionable_error_and_nothing_is_lost(app, tiny_model_dir):
    send(app, "Hello there")
    app.text_input(key="settings.model.model_path").set_value("/no/such/model").run()
    assert any("does not exist" in e.value for e in app.error)
    send(app, "Still there?")
    rows = messages(app)
    assert [r[1] for r in rows][:3] == ["Hello there", rows[1][1], "Still there?"]
    assert any("No model is loaded" in e.value for e in app.chat_message[3].error)
    # Fix the path and regenerate: the conversation carries on.
    app.text_input(key="settings.model.model_path").set_value(str(tiny_model_dir)).run()
    app.button(key="regenerate").click().run()
    rows = messages(app)
    assert len(rows) == 4 and rows[3][0] == "assistant" and rows[3][1].strip()
    assert not app.chat_message[3].error


def test_real_smollm2_answers_in_the_page(monkeypatch, smollm2_dir):
    with open_app(monkeypatch, smollm2_dir, timeout=180, temperature=0.0) as at:
        send(at, "What is the capital of France? Answer in one sentence.")
        assert "Paris" in messages(at)[1][1]
