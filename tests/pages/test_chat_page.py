"""The Chat page through Streamlit's AppTest, on a real (tiny, then SmolLM2) model."""

from __future__ import annotations

import re
import threading
from contextlib import closing

import pytest

from app.agent.loop import TextDelta, run_turn
from app.clients.client_protocol import GenerationParams
from app.domain.conversation import Conversation, Message
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


def test_new_conversation_empties_the_page_and_shows_the_welcome(app):
    send(app, "Hello there")
    app.button(key="history_new").click().run()
    assert messages(app) == []
    assert any(b.key == "example/chat/Capital of France" for b in app.button)


def test_an_example_prompt_is_sent_and_answered(app):
    app.button(key="example/chat/Capital of France").click().run()
    assert not app.exception
    (role1, text1, _), (role2, text2, _) = messages(app)
    assert (role1, text1) == ("user", "What is the capital of France?") and role2 == "assistant" and text2.strip()
    assert not any(b.key and b.key.startswith("example/") for b in app.button)  # the welcome is gone


def versions(at, index):
    """The `n/m` counter of the bubble at `index`, or None."""
    found = [c.value for c in at.chat_message[index].caption if re.fullmatch(r"\d+/\d+", c.value)]
    return found[0] if found else None


def test_regenerate_keeps_the_first_answer_as_a_version(app):
    send(app, "Hello there")
    first = messages(app)
    app.button(key="regenerate/chat/1").click().run()
    again = messages(app)
    assert len(again) == 2 and again[0] == first[0]
    assert again[1][1] == first[1][1]  # greedy: the same answer, not a second one appended
    assert versions(app, 1) == "2/2"
    app.button(key="version_back/chat/1").click().run()
    assert versions(app, 1) == "1/2" and messages(app) == first[:1] + [messages(app)[1]]


def test_editing_an_earlier_message_branches_and_keeps_the_rest_as_a_version(app):
    send(app, "Hello there")
    send(app, "Second question")
    # An earlier message offers one light button; its actions are drawn once it is pressed.
    assert not any(t.key and t.key.startswith("edit/chat/0/") for t in app.text_area)
    app.button(key="more/chat/0").click().run()
    edit_box = next(t for t in app.text_area if t.key and t.key.startswith("edit/chat/0/"))
    edit_box.set_value("Question number 2")
    app.button(key="edit_send/chat/0").click().run()
    rows = messages(app)
    assert [r[0] for r in rows] == ["user", "assistant"] and rows[0][1] == "Question number 2"
    assert versions(app, 0) == "2/2"
    app.button(key="version_back/chat/0").click().run()  # the whole earlier branch comes back
    assert [r[1] for r in messages(app)][0::2] == ["Hello there", "Second question"]
    conversation = app.session_state["conversation/chat"]
    assert [m["content"] for m in conversation.to_openai()][0::2] == ["Hello there", "Second question"]


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
    app.button(key="regenerate/chat/3").click().run()
    rows = messages(app)
    assert len(rows) == 4 and rows[3][0] == "assistant" and rows[3][1].strip()
    assert not app.chat_message[3].error


def test_real_smollm2_answers_in_the_page(monkeypatch, smollm2_dir):
    with open_app(monkeypatch, smollm2_dir, timeout=180, temperature=0.0) as at:
        send(at, "What is the capital of France? Answer in one sentence.")
        assert "Paris" in messages(at)[1][1]


def test_the_last_settings_come_back_in_a_new_session(app):
    """A refresh is a new Streamlit session: the user's last settings are restored from the database."""
    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    app.number_input(key="seed").set_value(1234)
    app.slider(key="temperature").set_value(1.3)
    app.text_area(key="system_prompt").set_value("You are terse.").run()
    refreshed = AppTest.from_file(MAIN, default_timeout=120)
    refreshed.run()
    assert not refreshed.exception
    assert refreshed.number_input(key="seed").value == 1234
    assert refreshed.slider(key="temperature").value == 1.3
    assert refreshed.text_area(key="system_prompt").value == "You are terse."
    assert "Changed by you: temperature" in " ".join(c.value for c in refreshed.sidebar.caption)


def long_conversation(turns: int) -> Conversation:
    conversation = Conversation()
    for turn in range(turns):
        conversation.add(Message("user", f"Question {turn}: what about **item {turn}**?"))
        conversation.add(Message("assistant", f"Answer {turn}: item {turn} is fine."))
    return conversation


def test_a_long_conversation_draws_its_recent_messages_and_earlier_ones_on_demand(app):
    from app.frontends.streamlit.history_window import PAGE_MESSAGES

    app.session_state["conversation/chat"] = long_conversation(150)
    app.run()
    assert len(messages(app)) == PAGE_MESSAGES and messages(app)[-1][1] == "Answer 149: item 149 is fine."
    # Only the last question and answer carry their whole row of actions; the others one light button each.
    assert [b.key for b in app.button if b.key.startswith("regenerate/")] == ["regenerate/chat/299"]
    assert sum(b.key.startswith("more/chat/") for b in app.button) == PAGE_MESSAGES - 2
    app.button(key="show_earlier_more/chat").click().run()
    assert len(messages(app)) == 2 * PAGE_MESSAGES
    app.button(key="show_earlier_all/chat").click().run()
    assert len(messages(app)) == 300 and messages(app)[0][1] == "Question 0: what about **item 0**?"
    assert not [b for b in app.button if b.key.startswith("show_earlier")]
    # The earliest answer's actions, opened: Regenerate branches there, and the model is asked again.
    app.button(key="more/chat/1").click().run()
    app.button(key="regenerate/chat/1").click().run()
    assert not app.exception and len(messages(app)) == 2 and versions(app, 1) == "2/2"


def test_a_send_in_a_long_conversation_keeps_the_window_and_the_model_sees_everything(app):
    from app.frontends.streamlit.history_window import PAGE_MESSAGES

    app.session_state["conversation/chat"] = long_conversation(60)
    app.run()
    send(app, "One more question")
    rows = messages(app)
    assert rows[-2][1] == "One more question" and rows[-1][0] == "assistant" and rows[-1][1]
    assert PAGE_MESSAGES <= len(rows) <= PAGE_MESSAGES + 2
    # The prompt held the whole conversation (about 20 tokens a message), not only the messages drawn.
    prompt_tokens = int(re.search(r"prompt (\d+) tokens", rows[-1][2][0])[1])
    assert prompt_tokens > 100 * 20, rows[-1][2]


def test_an_answer_with_html_gets_a_preview_that_opens_sandboxed_frames(app):
    conversation = Conversation()
    conversation.add(Message("user", "A page and a chart, please"))
    conversation.add(Message("assistant", "```html\n<h1>Hi</h1>\n```\n\n```mermaid\ngraph TD\nA-->B\n```"))
    conversation.add(Message("user", "Thanks"))
    conversation.add(Message("assistant", "You are welcome. `<b>inline</b>` code is no page."))
    app.session_state["conversation/chat"] = conversation
    app.run()
    assert [b.key for b in app.button if b.key.startswith("preview/")] == []  # the earlier answer's row is closed
    app.button(key="more/chat/1").click().run()
    assert [b.key for b in app.button if b.key.startswith("preview/")] == ["preview/chat/1"]  # none for the last
    app.button(key="preview/chat/1").click().run()
    assert not app.exception
    frames = [e.proto.srcdoc for e in app.get("iframe")]
    assert len(frames) == 2
    assert 'sandbox=""' in frames[0] and "&lt;h1&gt;Hi&lt;/h1&gt;" in frames[0]  # a page: drawn with no script
    assert 'sandbox="allow-scripts" src="/preview/mermaid#source=graph%20TD' in frames[1]
    assert not [t for t in app.toggle if "scripts" in t.label]  # a page with no script offers none to run
