"""Run policies and approval cards on the Tools page (AppTest, tiny random model, forced calls, a SQLite file per
test): a call to an "ask" tool waits as a card with Run, Edit and Deny; each decision shows in the conversation and
after a reload; a pending card survives a new session (a refresh, an app restart); Stop ends it; each tool's
policy is chosen in the sidebar and kept with the conversation."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from app.storage import ConversationStore
from tests.helpers import MAIN, TOOLS_PAGE, open_app

PAGE = "tools"


@pytest.fixture
def app(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE, timeout=180, temperature=0.0,
                  max_new_tokens=40) as at:
        yield at


def ask_with(at: AppTest, tool: str, text: str = "Count the words of this sentence please") -> None:
    """Send a message whose first answer must call `tool` (forced: the tiny model writes a valid call)."""
    at.selectbox(key=f"settings.{PAGE}.choice").set_value(tool).run()
    at.chat_input(key="tools_input").set_value(text).run()
    assert not at.exception


def pending_call_id(at: AppTest, database: ConversationStore) -> str:
    (entry,) = database.list("local", page=PAGE)
    answer = database.get("local", entry.id).messages[-1]
    assert answer.role == "assistant" and len(answer.tool_calls) == 1
    return answer.tool_calls[0].id


def stored(database: ConversationStore):
    (entry,) = database.list("local", page=PAGE)
    return database.get("local", entry.id)


def test_a_call_to_an_unannotated_tool_waits_as_a_card_and_runs_when_the_user_says_so(app, database):
    assert app.selectbox(key=f"_run_policy/{PAGE}/count_words").value == "ask"  # the default: it says nothing
    assert app.selectbox(key=f"_run_policy/{PAGE}/calculator").value == "auto"  # read-only
    ask_with(app, "count_words")
    call_id = pending_call_id(app, database)
    assert [m.role for m in stored(database).messages] == ["user", "assistant"]  # nothing ran
    bubble = app.chat_message[1]
    assert not bubble.status  # no result card: the approval card instead
    assert any("count_words" in m.value and "wants to run" in m.value for m in bubble.markdown)
    assert any("destructive" in c.value and "open world" in c.value for c in bubble.caption)  # MCP's defaults
    assert app.chat_input(key="tools_input").disabled  # a message now would leave the call without a result

    app.button(key=f"approval_run/{PAGE}/{call_id}").click().run()
    assert not app.exception
    messages = stored(database).messages
    assert [m.role for m in messages][:3] == ["user", "assistant", "tool"]
    # It ran: its own result (the tiny model's random text may be blank, which the tool refuses)
    assert messages[2].content.endswith(" characters") or "the text is empty" in messages[2].content
    (card,) = app.chat_message[1].status
    assert card.label.startswith("count_words")
    assert not app.chat_input(key="tools_input").disabled


def test_a_denied_call_tells_the_model_why_and_shows_as_declined_after_a_reload(app, database):
    ask_with(app, "count_words")
    call_id = pending_call_id(app, database)
    app.text_input(key=f"approval_reason/{PAGE}/{call_id}").set_value("not now")
    app.button(key=f"approval_deny/{PAGE}/{call_id}").click().run()
    assert not app.exception
    tool = stored(database).messages[2]
    assert (tool.role, tool.tool_status, tool.content) == ("tool", "denied", "The user declined to run this call: "
                                                                             "not now")
    assert stored(database).messages[3].role == "assistant"  # the turn went on: the model answered the refusal

    again = reopen(database)
    (card,) = again.chat_message[1].status
    assert "· declined →" in card.label and "not now" in card.label


def test_edited_arguments_are_checked_then_run_and_the_card_shows_both(app, database):
    ask_with(app, "count_words")
    call_id = pending_call_id(app, database)
    edit = app.text_area(key=f"approval_edit/{PAGE}/{call_id}")
    assert json.loads(edit.value).keys() == {"text"}  # the model's arguments, ready to change

    edit.set_value('{"text": ').run()  # not JSON
    app.button(key=f"approval_edited/{PAGE}/{call_id}").click().run()
    assert any("not valid JSON" in e.value for e in app.error)
    edit = app.text_area(key=f"approval_edit/{PAGE}/{call_id}")
    edit.set_value('{"words": "one two"}').run()  # against the tool's schema
    app.button(key=f"approval_edited/{PAGE}/{call_id}").click().run()
    assert any("text" in e.value and "Nothing ran" in e.value for e in app.error)
    assert [m.role for m in stored(database).messages] == ["user", "assistant"]  # still nothing ran

    app.text_area(key=f"approval_edit/{PAGE}/{call_id}").set_value('{"text": "one two three four"}').run()
    app.button(key=f"approval_edited/{PAGE}/{call_id}").click().run()
    assert not app.exception and not app.error
    messages = stored(database).messages
    call = messages[1].tool_calls[0]
    assert call.arguments == {"text": "one two three four"} and call.edited_from is not None
    assert call.edited_from != call.arguments and messages[2].content.startswith("4 words")

    again = reopen(database)
    (card,) = again.chat_message[1].status
    assert "· edited →" in card.label and "4 words" in card.label
    assert [c.value for c in card.caption] == ["Arguments, as you edited them", "The model's arguments", "Result"]
    assert json.loads(card.code[0].value) == {"text": "one two three four"}
    assert json.loads(card.code[1].value) == call.edited_from


def test_a_pending_call_survives_a_new_session_and_can_be_answered_there(app, database):
    ask_with(app, "count_words")
    call_id = pending_call_id(app, database)

    again = reopen(database)  # a refresh, or the app restarted: only what was stored
    assert again.chat_input(key="tools_input").disabled
    assert any("wants to run" in m.value for m in again.chat_message[1].markdown)
    again.button(key=f"approval_run/{PAGE}/{call_id}").click().run()
    assert not again.exception
    assert stored(database).messages[2].tool_status in ("ok", "failed")  # ran (see the first test)


def test_a_call_answered_in_another_tab_is_not_run_again_here(app, database):
    ask_with(app, "count_words")
    call_id = pending_call_id(app, database)
    other = reopen(database)  # the same conversation in a second tab, its call waiting there too
    other.button(key=f"approval_run/{PAGE}/{call_id}").click().run()
    assert not other.exception and stored(database).messages[2].role == "tool"
    count = len(stored(database).messages)

    app.button(key=f"approval_run/{PAGE}/{call_id}").click().run()  # this tab has not seen that yet
    assert not app.exception
    assert any("changed in another tab" in e.value for e in app.error)
    assert len(stored(database).messages) == count  # nothing ran twice


def test_stop_ends_the_turn_without_running_the_call(app, database):
    ask_with(app, "count_words")
    app.button(key=f"approval_stop/{PAGE}").click().run()
    assert not app.exception
    messages = stored(database).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"] and messages[2].tool_status == "stopped"
    assert not app.chat_input(key="tools_input").disabled
    (card,) = app.chat_message[1].status
    assert "· stopped" in card.label


def test_the_policy_chosen_in_the_sidebar_applies_and_is_kept_with_the_conversation(app, database):
    app.selectbox(key=f"_run_policy/{PAGE}/calculator").set_value("ask").run()
    app.selectbox(key=f"_run_policy/{PAGE}/count_words").set_value("auto").run()
    ask_with(app, "calculator", "What is 6 * 7?")
    assert not app.chat_message[1].status  # it asks now
    assert stored(database).settings["tool_policies"] == {"calculator": "ask", "count_words": "auto"}

    app.button(key="history_new").click().run()
    ask_with(app, "count_words")  # runs at once: "auto" is this page's setting until another conversation opens
    assert app.chat_message[1].status

    app.selectbox(key=f"_run_policy/{PAGE}/get_weather").set_value("never").run()
    assert "get_weather" not in app.selectbox(key=f"settings.{PAGE}.choice").options  # never offered, never forced


def reopen(database: ConversationStore) -> AppTest:
    """The stored conversation in a new session (a refresh, a link, a restarted app)."""
    (entry,) = database.list("local", page=PAGE)
    again = AppTest.from_file(MAIN, default_timeout=180)
    again.switch_page(TOOLS_PAGE)
    again.query_params["c"] = entry.id
    again.run()
    assert not again.exception
    return again


def shared_file(policies: dict[str, str]) -> bytes:
    """A conversation file as anyone can write one: a short exchange, and run policies in its settings."""
    return json.dumps({"format": "composite-demo-conversation", "version": 2, "title": "Shared with you",
                       "page": PAGE, "settings": {"tool_policies": policies},
                       "messages": [{"role": "user", "content": "Hello"},
                                    {"role": "assistant", "content": "Hello! How can I help?"}]}).encode()


def test_an_imported_file_cannot_make_a_tool_run_without_asking(app, database):
    """The file sets count_words (it asks by default) to run and calculator (read-only: runs) to ask: the import
    keeps the tighter one only, and the next turn's count_words call waits for the user."""
    imported = database.import_file("local", shared_file({"count_words": "auto", "calculator": "ask"}), page=PAGE)
    assert imported.not_granted == ["count_words"]
    opened = AppTest.from_file(MAIN, default_timeout=180)
    opened.switch_page(TOOLS_PAGE)
    opened.query_params["c"] = imported.id
    opened.run()
    assert not opened.exception
    assert opened.selectbox(key=f"_run_policy/{PAGE}/count_words").value == "ask"
    assert opened.selectbox(key=f"_run_policy/{PAGE}/calculator").value == "ask"

    ask_with(opened, "count_words")
    messages = database.get("local", imported.id).messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]  # the call waits: nothing ran
    assert messages[-1].tool_calls and messages[-1].tool_calls[0].name == "count_words"
    assert any("wants to run" in m.value for m in opened.chat_message[3].markdown)
