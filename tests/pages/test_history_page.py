"""Saved conversations through the app (AppTest, tiny random model, a SQLite file per test): saved as they happen,
reopened from the URL, rewound by Regenerate, kept by Clear, renamed and deleted from the history; an unreachable
database loses nothing on screen."""

from __future__ import annotations

import pytest

from app.domain.conversation import Attachment, Message
from tests.helpers import open_app


@pytest.fixture
def app(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as at:
        yield at


def send(at, text: str) -> None:
    at.chat_input(key="chat_input").set_value(text).run()
    assert not at.exception


def shown(at) -> list[str]:
    return [message.name for message in at.chat_message]


def test_a_sent_message_and_its_answer_are_saved_and_the_url_names_them(app, database):
    send(app, "Hello there")
    (entry,) = database.list("local", page="chat")
    assert entry.title == "Hello there" and entry.message_count == 2
    assert app.query_params["c"] == [entry.id] or app.query_params["c"] == entry.id
    stored = database.get("local", entry.id)
    assert [m.role for m in stored.messages] == ["user", "assistant"]
    assert stored.messages[1].metrics is not None and stored.messages[1].metrics.completion_tokens == 6


def test_a_new_session_with_the_link_reopens_the_conversation_and_its_settings(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as first:
        first.text_area(key="system_prompt").set_value("You are terse.").run()
        send(first, "Hello there")
    (entry,) = database.list("local")
    assert database.get("local", entry.id).settings["system_prompt"] == "You are terse."

    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    again = AppTest.from_file(MAIN, default_timeout=120)
    again.query_params["c"] = entry.id  # a refresh, or the link opened elsewhere
    again.run()
    assert not again.exception
    assert shown(again) == ["user", "assistant"] and again.chat_message[0].markdown[0].value == "Hello there"
    assert again.text_area(key="system_prompt").value == "You are terse."


def test_regenerate_saves_both_versions_and_a_new_conversation_keeps_it_in_the_history(app, database):
    send(app, "Hello there")
    (entry,) = database.list("local")
    before = database.get("local", entry.id)
    app.button(key="regenerate/chat/1").click().run()
    after = database.get("local", entry.id)
    assert [m.role for m in after.messages] == ["user", "assistant"] and after.version == before.version + 1
    assert len(after.messages[1].versions) == 1 and after.messages[1].version_index == 1  # the first one kept

    app.button(key="history_new").click().run()
    assert shown(app) == [] and "c" not in app.query_params
    assert [e.id for e in database.list("local")] == [entry.id]  # still there, in the history
    app.button(key=f"history_open/{entry.id}").click().run()
    assert shown(app) == ["user", "assistant"]


def test_rename_and_delete_from_the_history(app, database):
    send(app, "Hello there")
    (entry,) = database.list("local")
    title = next(t for t in app.text_input if t.key.startswith(f"history_title/{entry.id}"))
    title.set_value("Greetings").run()
    assert database.get("local", entry.id, with_messages=False).title == "Greetings"
    send(app, "And again")  # the rename moved the version on; saving goes on without a conflict
    assert database.get("local", entry.id).message_count == 4

    app.button(key="history_delete").click().run()
    assert database.list("local") == [] and shown(app) == []


def test_an_unknown_or_foreign_id_in_the_url_opens_nothing(monkeypatch, tiny_model_dir, database):
    foreign = database.create("someone-else", "chat")
    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params["c"] = foreign
    at.run()
    assert not at.exception and shown(at) == [] and "c" not in at.query_params
    assert "does not exist" in at.toast[0].value


def test_an_unreachable_database_keeps_the_conversation_on_screen(monkeypatch, tiny_model_dir):
    monkeypatch.setenv("DEMO_DATABASE_URL", "postgresql+psycopg://demo@127.0.0.1:9/nothing?connect_timeout=2")
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as at:
        send(at, "Hello there")
        assert shown(at) == ["user", "assistant"]  # answered, although nothing could be saved
        assert any("could not be saved" in w.value for w in at.warning)
        assert any("history is not available" in c.value for c in at.sidebar.caption)


def test_regenerate_in_a_stale_tab_never_deletes_what_another_tab_wrote(app, database):
    send(app, "Hello there")
    (entry,) = database.list("local")
    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    other = AppTest.from_file(MAIN, default_timeout=120)  # the same conversation in a second tab
    other.query_params["c"] = entry.id
    other.run()
    other.number_input(key="max_new_tokens").set_value(6).run()
    send(other, "Written in the other tab")
    app.button(key="regenerate/chat/1").click().run()  # this tab has not seen the other tab's messages
    assert any("changed in another tab" in w.value for w in app.warning)
    contents = [m.content for m in database.get("local", entry.id).messages if m.role == "user"]
    assert contents == ["Hello there", "Written in the other tab"]


def test_with_authentication_configured_a_visitor_who_has_not_signed_in_saves_and_sees_nothing(
        monkeypatch, tiny_model_dir, database):
    database.append("local", database.create("local", "chat"), Message("user", "a conversation of the local user"))
    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    at = AppTest.from_file(MAIN, default_timeout=120)
    at.secrets["auth"] = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "x" * 32,
                          "client_id": "demo", "client_secret": "demo",
                          "server_metadata_url": "https://accounts.example/.well-known/openid-configuration"}
    at.run()
    at.number_input(key="max_new_tokens").set_value(6).run()
    assert at.button(key="history_login") and all(not b.key.startswith("history_open/") for b in at.button)
    send(at, "Hello there")
    assert shown(at) == ["user", "assistant"]  # the chat works...
    assert [e.title for e in database.list("local")] == ["a conversation of the local user"]  # ...and saves nothing
    assert "c" not in at.query_params


# ----- stored data the page cannot use as it is (saved before imports were strict, or written by hand) -------------

def _open_link(at, conversation_id: str):
    at.query_params["c"] = conversation_id  # the conversation's link, in a session that was on the Chat page
    at.run()
    assert not at.exception


def test_a_stored_setting_of_the_wrong_type_is_left_at_its_default_with_a_notice(app, database):
    conversation = database.create("local", "chat", settings={"system_prompt": ["Be", "terse"], "tool_choice": "auto"})
    database.append("local", conversation, Message("user", "Hello there"))
    database.append("local", conversation, Message("assistant", "Hi!"))
    _open_link(app, conversation)  # it crashed here, in the sidebar's system prompt, on every open of the link
    assert shown(app) == ["user", "assistant"]
    assert app.text_area(key="system_prompt").value == ""  # the default
    assert any("settings.system_prompt: Input should be a valid string" in toast.value for toast in app.toast)
    send(app, "And now?")  # the conversation goes on, and its settings are valid again
    assert database.get("local", conversation).settings["system_prompt"] == ""


def test_a_stored_conversation_that_cannot_be_read_says_so_and_the_rest_of_the_app_works(app, database):
    from datetime import UTC, datetime

    from sqlalchemy import insert

    from app.storage.tables import MessageRow

    broken = database.create("local", "chat", title="Broken")
    with database.engine.begin() as connection:
        connection.execute(insert(MessageRow).values(conversation_id=broken, seq=0, deleted=False, search_text="",
                                                     payload='{"role": "user", "content": ["x"]}',
                                                     created_at=datetime.now(UTC)))
    _open_link(app, broken)
    (error,) = [e.value for e in app.error if "could not be shown" in e.value]
    assert "messages[0].content: Input should be a valid string" in error and "It is kept" in error
    assert "Traceback" not in error and "/app/" not in error
    assert shown(app) == [] and app.button(key=f"history_open/{broken}")  # the history lists it
    send(app, "A new question")  # goes to a new conversation: the unreadable one stays as it was
    assert shown(app) == ["user", "assistant"] and not [e for e in app.error if "could not be shown" in e.value]
    assert [entry.title for entry in database.list("local")] == ["A new question", "Broken"]
    app.button(key=f"history_open/{broken}").click().run()  # opened from the history: the same message
    assert not app.exception and any("could not be shown" in e.value for e in app.error)
    app.button(key="history_delete").click().run()  # ...and it can be deleted
    assert not app.exception and [entry.title for entry in database.list("local")] == ["A new question"]


def test_a_stored_conversation_that_fails_to_draw_shows_why_instead_of_a_traceback(app, database):
    conversation = database.create("local", "chat")
    database.append("local", conversation, Message("user", "Look", attachments=[
        Attachment("image", "photo.png", data=b"not a picture at all")]))  # stored before the import checked it
    _open_link(app, conversation)
    assert any("could not be shown: UnidentifiedImageError" in e.value for e in app.error)
    app.button(key="history_new").click().run()  # the sidebar works: a new conversation
    assert not app.exception and shown(app) == [] and not app.error


def test_every_setting_a_page_restores_has_a_checked_type():
    """A setting added to the pages must be added to the stored shape, or imports would refuse it (extra key)."""
    from app.frontends.streamlit.persistence import SETTINGS_KEYS
    from app.storage.schema import SettingsRecord

    assert set(SETTINGS_KEYS) == set(SettingsRecord.model_fields)


def test_a_long_conversation_opened_from_a_search_shows_the_message_that_matched(app, database):
    from app.domain.conversation import Conversation
    from app.frontends.streamlit.history_window import PAGE_MESSAGES

    long = Conversation()
    for turn in range(80):
        long.add(Message("user", f"Question {turn}: tell me about harbour number {turn}."))
        long.add(Message("assistant", f"Harbour {turn} is calm."))
    app.session_state["conversation/chat"] = long
    app.run()
    send(app, "And the last one?")  # saved with this message
    (entry,) = database.list("local")
    app.button(key="history_new").click().run()
    app.button(key=f"history_open/{entry.id}").click().run()  # opened plainly: its recent messages
    texts = [m.markdown[0].value for m in app.chat_message if m.markdown]
    assert len(app.chat_message) <= PAGE_MESSAGES + 2 and "Question 3: tell me about harbour number 3." not in texts
    app.button(key="history_new").click().run()
    app.text_input(key="history_search/chat").set_value("harbour number 3.").run()
    app.button(key=f"history_open/{entry.id}").click().run()  # opened from a search: its match is drawn
    texts = [m.markdown[0].value for m in app.chat_message if m.markdown]
    assert texts[0] == "Question 3: tell me about harbour number 3." and len(app.chat_message) == 2 * 80 + 2 - 6


def _listed(at) -> list[str]:
    return [str(button.label) for button in at.button if button.key.startswith("history_open/")]


def test_folders_pins_and_tags_from_the_history_menu(app, database):
    from app.storage.folders import FolderStore

    send(app, "About taxes")
    app.button(key="history_new").click().run()
    send(app, "About soup")
    [soup, taxes] = database.list("local")
    assert _listed(app) == ["About soup", "About taxes"]

    app.text_input(key="history_new_folder").set_value("Work").run()
    app.button(key="history_make_folder").click().run()
    [work] = FolderStore(database.engine).list("local")
    app.button(key=f"history_open/{taxes.id}").click().run()  # open it: its menu is drawn
    app.selectbox(key=f"history_move/{taxes.id}/").set_value(work.id).run()
    app.button(key="history_pin").click().run()
    next(m for m in app.multiselect if m.key.startswith(f"history_tags/{taxes.id}/")).set_value(["money", "Q4"]).run()
    assert not app.exception
    stored = {item.id: item for item in database.list("local")}
    assert stored[taxes.id].folder_id == work.id and stored[taxes.id].pinned and stored[taxes.id].tags == ("money",
                                                                                                         "q4")
    tags = next(m for m in app.multiselect if m.key.startswith(f"history_tags/{taxes.id}/"))
    tags.set_value(["money", "q4", "x" * 41]).run()  # refused: the box shows what is stored, not what was typed
    assert next(m for m in app.multiselect if m.key.startswith(f"history_tags/{taxes.id}/")).value == ["money", "q4"]
    assert database.list("local")[0].tags == ("money", "q4")
    assert _listed(app) == ["About taxes", "About soup"]  # pinned first
    assert "Pinned" in [caption.value for caption in app.caption]

    app.selectbox(key="history_folder/chat").set_value("").run()  # not in a folder
    assert _listed(app) == ["About soup"]
    app.selectbox(key="history_folder/chat").set_value(work.id).run()
    assert _listed(app) == ["About taxes"]
    app.text_input(key="history_search/chat").set_value("soup").run()  # a search crosses the folders
    assert _listed(app) == ["About soup"]
    app.text_input(key="history_search/chat").set_value("").run()
    app.selectbox(key="history_folder/chat").set_value("*").run()
    app.session_state["history_tag/chat"] = "money"
    app.run()
    assert _listed(app) == ["About taxes"]
    app.session_state["history_tag/chat"] = None
    app.run()

    app.selectbox(key="history_folder/chat").set_value(work.id).run()
    app.button(key="history_delete_folder_all").click().run()  # the open conversation goes with it
    assert [item.title for item in database.list("local")] == ["About soup"]
    assert FolderStore(database.engine).list("local") == [] and shown(app) == []


def test_thumbs_and_a_comment_are_saved_with_the_answer_and_counted_for_its_model(app, database):
    from app.domain.conversation import Feedback
    from app.storage.feedback import FeedbackCount, FeedbackStore

    send(app, "Hello there")
    send(app, "And again")
    (entry,) = database.list("local", page="chat")
    answer = database.get("local", entry.id).messages[3]
    assert answer.model.startswith("tiny-model") and answer.feedback is None  # each answer names its model
    (thumbs,) = [w for w in app.get("feedback") if w.key.startswith("feedback/chat/3/")]
    thumbs.set_value(0).run()  # thumbs down
    assert not app.exception
    assert database.get("local", entry.id).messages[3].feedback == Feedback("down")
    comment = next(w for w in app.text_area if w.key.startswith("feedback_comment/chat/3/"))
    comment.input("It only repeated itself").run()
    next(b for b in app.button if b.key.startswith("feedback_save/chat/3/")).click().run()
    stored = database.get("local", entry.id)
    assert stored.messages[3].feedback == Feedback("down", "It only repeated itself")
    assert [m.content for m in stored.messages] == [m.content for m in app.session_state["conversation/chat"].messages]
    assert FeedbackStore(database.engine).counts("local") == [FeedbackCount(answer.model, 0, 1, 1)]

    (thumbs,) = [w for w in app.get("feedback") if w.key.startswith("feedback/chat/3/")]
    assert thumbs.value == 0  # drawn as stored
    thumbs.set_value(None).run()  # unrated again
    assert database.get("local", entry.id).messages[3].feedback is None
