"""Feedback on answers (app/storage/feedback.py, ConversationStore.replace_messages), on SQLite and PostgreSQL: kept
with the answer, rewritten in place without touching the rest of the conversation, refused when another tab has
moved the conversation on, carried by exports and imports, and counted per model, those in kept versions too."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.domain.conversation import Conversation, Feedback, Message
from app.storage import ConversationStore, ImportRejected, VersionConflict
from app.storage.codec import conversation_to_markdown
from app.storage.feedback import UNKNOWN_MODEL, FeedbackCount, FeedbackStore
from app.storage.tables import MessageRow


def _stored(store: ConversationStore, owner: str, turns: list[tuple[str, str, str]]) -> tuple[str, Conversation]:
    conversation = Conversation()
    made = store.create(owner, "chat")
    for question, answer, model in turns:
        for message in (Message("user", question), Message("assistant", answer, model=model)):
            conversation.add(message)
            store.append(owner, made, message)
    return made, conversation


def test_feedback_is_rewritten_in_place_and_counted_per_model_with_kept_versions(engine):
    store, feedback = ConversationStore(engine), FeedbackStore(engine)
    made, conversation = _stored(store, "alice", [("Capital of France?", "Paris.", "SmolLM2"),
                                                  ("And of Spain?", "Lisbon.", "SmolLM2")])
    with engine.connect() as connection:
        rows_before = connection.execute(select(MessageRow.seq, MessageRow.created_at)
                                         .where(MessageRow.conversation_id == made)).all()
    version = store.get("alice", made).version
    conversation.messages[3].feedback = Feedback("down", "Madrid is the capital of Spain")
    version = store.replace_messages("alice", made, {3: conversation.messages[3]}, version, expected_count=4)
    # Regenerated: the rated wrong answer lives on as a version of the new one, and still counts.
    conversation.new_version(3)
    conversation.add(Message("assistant", "Madrid.", model="SmolLM2", feedback=Feedback("up")))
    version = store.replace_messages("alice", made, {3: conversation.messages[3]}, version, expected_count=4)
    conversation.messages[1].feedback = Feedback("up", "right")  # an earlier answer: its row alone
    store.replace_messages("alice", made, {1: conversation.messages[1]}, version, expected_count=4)

    stored = store.get("alice", made).messages
    assert [m.content for m in stored] == ["Capital of France?", "Paris.", "And of Spain?", "Madrid."]
    assert stored[3].feedback == Feedback("up") and stored[3].versions[0][0].feedback == Feedback(
        "down", "Madrid is the capital of Spain")
    assert stored == conversation.messages
    with engine.connect() as connection:  # the same rows, rewritten: none deleted or added
        assert connection.execute(select(MessageRow.seq, MessageRow.created_at)
                                  .where(MessageRow.conversation_id == made)).all() == rows_before
    assert [item.id for item in store.list("alice", search="madrid")] == [made]  # search reads the new text

    other, sums = _stored(store, "alice", [("Two plus two?", "Four.", "Qwen")])
    sums.messages[1].feedback = Feedback("up", "exact")
    store.replace_messages("alice", other, {1: sums.messages[1]}, store.get("alice", other).version, 2)
    bob, _ = _stored(store, "bob", [("Hi", "Hello", "")])  # another owner's answers are not alice's to count
    store.replace_messages("bob", bob, {1: Message("assistant", "Hello", feedback=Feedback("down"))},
                           store.get("bob", bob).version, expected_count=2)
    assert feedback.counts("alice") == [FeedbackCount("SmolLM2", up=2, down=1, comments=2),
                                        FeedbackCount("Qwen", up=1, down=0, comments=1)]
    assert feedback.counts("bob") == [FeedbackCount(UNKNOWN_MODEL, up=0, down=1, comments=0)]
    rated = {(r.question, r.answer.content, r.answer.feedback.rating) for r in feedback.rated_answers("alice")}
    assert rated == {("Capital of France?", "Paris.", "up"), ("And of Spain?", "Madrid.", "up"),
                     ("And of Spain?", "Lisbon.", "down"), ("Two plus two?", "Four.", "up")}


def test_a_rewrite_after_another_tab_added_messages_is_refused_and_changes_nothing(engine):
    store = ConversationStore(engine)
    made, conversation = _stored(store, "alice", [("Hi", "Hello", "SmolLM2")])
    version = store.get("alice", made).version
    store.append("alice", made, Message("user", "From the other tab"))
    rated = Message("assistant", "Hello", model="SmolLM2", feedback=Feedback("up"))
    with pytest.raises(VersionConflict):
        store.replace_messages("alice", made, {1: rated}, version, expected_count=2)
    assert store.get("alice", made).messages[1].feedback is None
    with pytest.raises(VersionConflict):  # an index past the end is no place to write
        store.replace_messages("alice", made, {7: rated}, version, expected_count=3)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_feedback_travels_in_exports_and_a_bad_one_in_an_import_says_where(engine):
    store = ConversationStore(engine)
    made, conversation = _stored(store, "alice", [("Hi", "Hello", "SmolLM2")])
    rated = Message("assistant", "Hello", model="SmolLM2", feedback=Feedback("down", "too short"))
    store.replace_messages("alice", made, {1: rated}, store.get("alice", made).version, expected_count=2)
    exported = store.export_json("alice", made)
    copy = store.import_json("bob", json.dumps(exported).encode())
    assert store.get("bob", copy).messages[1] == rated
    markdown = conversation_to_markdown("Hi", store.get("bob", copy).messages)
    assert "**Feedback:** 👎 Bad answer: too short" in markdown

    exported["metadata"][1]["feedback"] = {"rating": "meh"}
    with pytest.raises(ImportRejected, match=r"metadata\[1\]\.feedback\.rating"):
        store.import_json("bob", json.dumps(exported).encode())
    exported["metadata"][1]["feedback"] = {"rating": "up", "comment": "x" * 2001}
    with pytest.raises(ImportRejected, match="comment"):
        store.import_json("bob", json.dumps(exported).encode())


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_rating_keeps_the_conversations_place_in_the_history_and_an_edit_moves_it(engine):
    store = ConversationStore(engine)
    older, _ = _stored(store, "alice", [("Old question", "Old answer", "SmolLM2")])
    newer, _ = _stored(store, "alice", [("New question", "New answer", "SmolLM2")])
    assert [item.id for item in store.list("alice")] == [newer, older]
    rated = Message("assistant", "Old answer", model="SmolLM2", feedback=Feedback("up"))
    version = store.replace_messages("alice", older, {1: rated}, store.get("alice", older).version, 2)
    assert [item.id for item in store.list("alice")] == [newer, older]  # a rating is no edit
    store.replace_messages("alice", older, {1: Message("assistant", "Another answer", model="SmolLM2")}, version, 2)
    assert [item.id for item in store.list("alice")] == [older, newer]


def test_an_answer_records_its_model_by_its_hub_id_not_the_cache_revision(tiny_model_dir, tmp_path):
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    snapshot = tmp_path / "hub" / "models--someone--Tiny-Chat" / "snapshots" / ("0123abcd" * 5)
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(tiny_model_dir, target_is_directory=True)
    client = HFClient(ModelSettings(dtype="float32", model_path=str(snapshot), device="cpu"))
    try:
        assert client.capabilities.model_id == "someone/Tiny-Chat"
    finally:
        client.close()
