"""An MCP server's question in the Tools page (AppTest, tiny random model, the asking server over stdio from an
mcp.json): the forced call to book_table asks first (it changes things), runs once approved, and then the server
asks the user how many guests and when: a form in the chat. A missing required answer is refused on the form; the
answer reaches the server, whose result ends the call; Decline and Stop too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.storage import ConversationStore
from tests.helpers import TOOLS_PAGE, open_app

SERVER = Path(__file__).parent.parent / "mcp_servers" / "asking_server.py"
PAGE = "tools"


@pytest.fixture
def app(monkeypatch, tmp_path, tiny_model_dir, database):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"asking": {"command": sys.executable, "args": [str(SERVER)]}}}))
    monkeypatch.setenv("DEMO_MCP_CONFIG", str(config))
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE, timeout=180, temperature=0.0,
                  max_new_tokens=40) as at:
        yield at


def stored(database: ConversationStore):
    (entry,) = database.list("local", page=PAGE)
    return database.get("local", entry.id)


def asked(at, database) -> str:
    """Book a table (forced), approve the call: the server's question shows. Returns the call's id."""
    assert at.selectbox(key=f"_run_policy/{PAGE}/book_table").value == "ask"  # it changes things: asks first
    at.selectbox(key=f"settings.{PAGE}.choice").set_value("book_table").run()
    at.chat_input(key="tools_input").set_value("Book me a table").run()
    call_id = stored(database).messages[1].tool_calls[0].id
    at.button(key=f"approval_run/{PAGE}/{call_id}").click().run()
    assert not at.exception
    bubble = at.chat_message[1]
    assert any("book_table" in m.value and "asks you" in m.value for m in bubble.markdown)
    assert any(t.value.endswith("how many guests, and when?") for t in bubble.text)
    assert at.chat_input(key="tools_input").disabled
    return call_id


def field(call_id: str, name: str) -> str:
    return f"question_field/{PAGE}/{call_id}/{name}"


def test_the_answer_goes_back_to_the_server_and_the_call_ends_with_its_result(app, database):
    call_id = asked(app, database)
    assert app.selectbox(key=field(call_id, "time")).options == ["19:00", "20:00", "21:00"]
    app.button(key=f"FormSubmitter:question_form/{PAGE}/{call_id}-Send").click().run()  # nothing filled in
    assert any("fill in" in e.value and "guests" in e.value.lower() for e in app.error)

    app.number_input(key=field(call_id, "guests")).set_value(4)
    app.selectbox(key=field(call_id, "time")).set_value("20:00")
    app.checkbox(key=field(call_id, "vegetarian")).check()
    app.button(key=f"FormSubmitter:question_form/{PAGE}/{call_id}-Send").click().run()
    assert not app.exception
    tool = stored(database).messages[2]
    assert tool.role == "tool" and tool.content.startswith("Booked ") and "for 4 at 20:00 (vegetarian)" in tool.content
    (card,) = app.chat_message[1].status
    assert card.label.startswith("book_table → Booked")
    assert not app.chat_input(key="tools_input").disabled


def test_decline_tells_the_server(app, database):
    call_id = asked(app, database)
    app.button(key=f"FormSubmitter:question_form/{PAGE}/{call_id}-Decline").click().run()
    assert not app.exception
    assert "the user chose decline" in stored(database).messages[2].content


def test_stop_cancels_the_call_that_waits_for_an_answer(app, database):
    asked(app, database)
    app.button(key=f"approval_stop/{PAGE}").click().run()
    assert not app.exception
    messages = stored(database).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"] and messages[2].tool_status == "stopped"
    assert not app.chat_input(key="tools_input").disabled
