"""Eval sets kept in the app's database (app/evals/library.py): a turn of a conversation saved as a test case
(text only, up to its question, with the page's tools and settings), cases added to a set one by one with their
names kept apart, an import that would overwrite a set refused unless asked, and thumbs-down answers offered as
candidates."""

from __future__ import annotations

import pytest

from app.domain.conversation import Attachment, Conversation, Feedback, Message, ToolCall
from app.evals.cases import ContainsCheck, EvalSet, Sampling
from app.evals.library import EvalLibraryError, add_case, case_from_turn, save_set, stored_set, thumbs_down_candidates
from app.storage import ConversationStore
from app.storage.eval_sets import EvalSetStore
from app.storage.feedback import FeedbackStore

CONTAINS = ContainsCheck(type="contains", text="391")


def _conversation() -> Conversation:
    return Conversation([
        Message("user", "What is 17 * 23?", attachments=[Attachment("document", "notes.txt", text="see page 4")]),
        Message("assistant", "", tool_calls=[ToolCall("calculator", {"expression": "17 * 23"}, id="call_1")]),
        Message("tool", "391", tool_call_id="call_1", name="calculator", tool_status="ok"),
        Message("assistant", "It is 391."),
        Message("user", "And 2 + 2?"),
        Message("assistant", "4"),
    ])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_turn_becomes_a_case_in_a_set_and_names_are_kept_apart(engine):
    store = EvalSetStore(engine)
    case = case_from_turn(_conversation(), 5, "adds", [CONTAINS], page="tools", tools=["calculator"],
                          sampling=Sampling(temperature=0.0))
    assert [m.role for m in case.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert "see page 4" in case.messages[0].content  # the document's text, as the model read it
    assert case.messages[1].tool_calls[0]["function"]["name"] == "calculator"
    assert case.question == "And 2 + 2?" and case.tools == ["calculator"]
    assert add_case(store, "alice", "Arithmetic", case) == "adds"
    assert add_case(store, "alice", "Arithmetic", case) == "adds (2)"
    stored, version = stored_set(store, "alice", "Arithmetic")
    assert [c.name for c in stored.cases] == ["adds", "adds (2)"] and version == 2
    with pytest.raises(EvalLibraryError, match="Only an answer to a message"):
        case_from_turn(_conversation(), 2, "a tool result", [CONTAINS])

    imported = EvalSet(name="Arithmetic", cases=[case])
    with pytest.raises(EvalLibraryError, match="already"):
        save_set(store, "alice", imported)
    save_set(store, "alice", imported, replace=True)
    assert [c.name for c in stored_set(store, "alice", "Arithmetic")[0].cases] == ["adds"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_answers_rated_down_are_offered_as_candidates(engine):
    conversations = ConversationStore(engine)
    made = conversations.create("alice", "chat")
    for message in (Message("user", "Capital of Spain?"),
                    Message("assistant", "Lisbon.", model="SmolLM2", feedback=Feedback("down", "It is Madrid")),
                    Message("user", "Capital of France?"),
                    Message("assistant", "Paris.", model="SmolLM2", feedback=Feedback("up"))):
        conversations.append("alice", made, message)
    (candidate,) = thumbs_down_candidates(FeedbackStore(engine), "alice")
    assert (candidate.question, candidate.answer, candidate.comment, candidate.model) == (
        "Capital of Spain?", "Lisbon.", "It is Madrid", "SmolLM2")
