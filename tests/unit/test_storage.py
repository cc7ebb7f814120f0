"""Saved conversations (app/storage): the message codec, migrations, the store's owner checks, concurrency,
truncation, search, export and import. The database tests run on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from sqlalchemy import Engine, event, func, insert, inspect, select
from sqlalchemy.exc import OperationalError

from app.config import DatabaseSettings, ImageSettings
from app.domain.conversation import ROLES, AnswerMetrics, Attachment, Message, ToolCall
from app.storage import (
    ConversationNotFound,
    ConversationStore,
    ImportRejected,
    StorageError,
    UnreadableConversation,
    VersionConflict,
    open_database,
)
from app.storage.codec import (
    conversation_to_markdown,
    decode_message,
    decode_message_json,
    encode_message,
    encode_message_json,
)
from app.storage.database import database_url as resolve_url
from app.storage.migrate import current_revision, head_revision, upgrade_to_head
from app.storage.schema import AttachmentRecord, MessageRecord, MetricsRecord, SettingsRecord, ToolCallRecord
from app.storage.tables import (
    KNOWLEDGE_FTS_TABLE,
    KNOWLEDGE_TSVECTOR_INDEX,
    TRIGRAM_INDEX,
    ConversationRow,
    MessageRow,
)
from app.storage.transfer import MAX_IMPORT_BYTES
from app.tools.documents import MAX_UPLOAD_BYTES as MAX_DOCUMENT_BYTES
from tests.database import schema_differences
from tests.helpers import ROOT, at_once

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def every_kind_of_message() -> list[Message]:
    """One of each message the pages save."""
    return [
        Message("system", "Be brief."),
        Message("user", "Summarise this, please", attachments=[
            Attachment("document", "report.pdf", text="Sales rose.\n```\nnot a fence end", note="cut to 12000 chars")]),
        Message("assistant", "Let me plot it.", tool_calls=[ToolCall("python", {"code": "plot()", "n": [1, 2.5]},
                                                                     id="call_1")],
                metrics=AnswerMetrics(prompt_tokens=120, completion_tokens=14, time_to_first_token_s=0.25,
                                      tokens_per_second=31.5, total_time_s=0.7, finish_reason="tool_calls",
                                      dropped_messages=2)),
        Message("tool", "[plot]", tool_call_id="call_1", name="python", tool_status="ok", duration_s=1.25,
                display_text="full output\n" * 3, attachments=[Attachment("image", "plot.png", data=PNG)]),
        Message("assistant", "Sales ro", metrics=AnswerMetrics(completion_tokens=3, finish_reason="cancelled"),
                error="Stopped by you."),
        Message("assistant", "", metrics=AnswerMetrics(finish_reason="error"), error="The model server went away."),
    ]


# ----- the codec ---------------------------------------------------------------------------------------------------

_floats = st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(st.none() | st.booleans() | st.integers() | _floats | st.text(),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                     max_leaves=8)
_messages = st.builds(
    Message,
    role=st.sampled_from(ROLES),
    content=st.text(),
    tool_calls=st.lists(st.builds(ToolCall, name=st.text(min_size=1), id=st.text(),
                                  arguments=st.dictionaries(st.text(), _json, max_size=3)), max_size=3),
    tool_call_id=st.none() | st.text(),
    name=st.none() | st.text(),
    metrics=st.none() | st.builds(
        AnswerMetrics, prompt_tokens=st.integers(0, 2**40), completion_tokens=st.integers(0, 2**40),
        time_to_first_token_s=st.none() | _floats, tokens_per_second=st.none() | _floats, total_time_s=_floats,
        finish_reason=st.sampled_from([None, "stop", "length", "cancelled", "tool_calls", "error"]),
        dropped_messages=st.integers(0, 10**6)),
    error=st.none() | st.text(),
    tool_status=st.sampled_from([None, "ok", "failed", "stopped"]),
    duration_s=st.none() | _floats,
    attachments=st.lists(st.builds(Attachment, kind=st.sampled_from(["image", "document"]), name=st.text(),
                                   data=st.binary(max_size=64), text=st.text(), note=st.text()), max_size=2),
    display_text=st.none() | st.text(),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages)
def test_every_field_of_a_message_survives_the_codec(message):
    through_json_text = json.loads(json.dumps(encode_message(message)))
    assert decode_message(through_json_text) == message
    assert decode_message_json(encode_message_json(message)) == message


@pytest.mark.parametrize(("dataclass", "record"), [(Message, MessageRecord), (ToolCall, ToolCallRecord),
                                                   (AnswerMetrics, MetricsRecord), (Attachment, AttachmentRecord)])
def test_the_stored_shape_has_every_field_of_the_dataclasses(dataclass, record):
    """A field added to Message (or its parts) must be added to the stored shape, or saving would drop it."""
    assert {field.name for field in dataclasses.fields(dataclass)} == set(record.model_fields)


def test_every_kind_of_message_survives_the_codec():
    for message in every_kind_of_message():
        assert decode_message(json.loads(json.dumps(encode_message(message)))) == message
    tool = encode_message(every_kind_of_message()[3])
    assert tool["attachments"][0]["data"].startswith("iVBORw0KGgo")  # standard base64 of the PNG
    assert "tool_calls" not in tool  # defaults are left out


@pytest.mark.parametrize(("data", "error"), [
    ({"role": "robot"}, "role"),
    ({"role": "user", "attachments": [{"kind": "image", "name": "a", "data": "not*base64"}]}, "not valid base64"),
    ({"role": "user", "content": 3}, "content"),
    ({"role": "user", "colour": "red"}, "colour"),
    ({"role": "assistant", "metrics": {"completion_tokens": "3"}}, "completion_tokens"),
])
def test_a_wrongly_shaped_record_is_refused(data, error):
    with pytest.raises(ValueError, match=error):
        decode_message(data)


def test_markdown_export_is_readable():
    text = conversation_to_markdown("Sales\nreport", every_kind_of_message())
    assert text.startswith("# Sales report\n")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## System", "## User", "## Assistant", "## Tool result (python, ok, 1.25 s)", "## Assistant",
                        "## Assistant"]
    assert '**Tool call** `python` (call_1)\n\n```json\n{\n  "code": "plot()",' in text
    assert "```text\n" + "full output\n" * 3 + "\n```" in text  # a tool's full output, fenced
    assert "![plot.png](data:image/png;base64,iVBORw0KGgo" in text
    # The document's text holds a ``` line: its fence is longer, so the text cannot end it.
    assert "````text\nSales rose.\n```\nnot a fence end\n````" in text
    assert "> **Error:** Stopped by you." in text
    assert "_14 tokens · TTFT 0.25 s · 31.5 tok/s · prompt 120 tokens · 2 oldest messages" in text


# ----- the database: opening and migrating -------------------------------------------------------------------------

@pytest.fixture
def store(engine: Engine) -> ConversationStore:
    return ConversationStore(engine)


def test_opening_an_empty_database_migrates_it_to_head_once(database_url):
    engine = open_database(database_url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert {"conversations", "messages", "preferences", "api_responses", "mcp_tokens", "compare_votes",
                "knowledge_collections", "knowledge_documents", "knowledge_chunks", "api_files",
                "api_vector_store_files", "knowledge_vectors", "knowledge_files", "presets", "folders",
                "conversation_tags", "eval_sets", "eval_runs", "alembic_version"} <= tables
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision() == "0013"
        assert schema_differences(engine) == []  # the migration creates exactly what the models declare
        if engine.dialect.name == "postgresql":
            assert TRIGRAM_INDEX in {index["name"] for index in inspect(engine).get_indexes("messages")}
            assert KNOWLEDGE_TSVECTOR_INDEX in {index["name"] for index in inspect(engine).get_indexes(
                "knowledge_chunks")}
        else:
            assert KNOWLEDGE_FTS_TABLE in tables
        store = ConversationStore(engine)
        kept = store.create("alice", "chat", title="kept")
        upgrade_to_head(engine)  # again: nothing to do, nothing lost
        open_database(database_url).dispose()
        with engine.connect() as connection:
            assert current_revision(connection) == "0013"
        assert store.get("alice", kept).title == "kept"
    finally:
        engine.dispose()


def test_several_processes_opening_a_new_database_at_once_all_succeed(database_url):
    start = time.time() + 4  # after the imports of all of them: they really open the database together
    script = ("import sys, time; from app.storage import open_database; "
              f"time.sleep(max(0, {start} - time.time())); open_database(sys.argv[1]).dispose(); print('ok')")
    processes = [subprocess.Popen([sys.executable, "-c", script, database_url], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [process.communicate(timeout=120) for process in processes]
    assert [(process.returncode, out.strip()) for process, (out, _) in zip(processes, results, strict=True)] == \
        [(0, "ok")] * 4, [err[-2000:] for _, err in results]
    engine = open_database(database_url)
    with engine.connect() as connection:
        assert current_revision(connection) == head_revision()
    engine.dispose()


def test_without_a_url_it_is_sqlite_in_the_cache_folder_with_wal_foreign_keys_and_a_busy_timeout(tmp_path,
                                                                                             monkeypatch):
    monkeypatch.setenv("DEMO_CACHE_DIR", str(tmp_path / "not" / "yet"))
    monkeypatch.delenv("DEMO_DATABASE_URL", raising=False)
    engine = open_database()
    try:
        assert (tmp_path / "not" / "yet" / "conversations.db").is_file()
        with engine.connect() as connection:
            pragmas = {name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                       for name in ("journal_mode", "foreign_keys", "busy_timeout")}
        assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 5000}
    finally:
        engine.dispose()


def test_the_database_url_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DEMO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DEMO_DATABASE_URL", raising=False)
    assert DatabaseSettings.from_env().url == f"sqlite:///{tmp_path / 'conversations.db'}"
    monkeypatch.setenv("DEMO_DATABASE_URL", " postgresql+psycopg://demo:secret@db.example/demo ")
    assert DatabaseSettings.from_env().url == "postgresql+psycopg://demo:secret@db.example/demo"
    assert resolve_url("postgresql://demo@db/demo").drivername == "postgresql+psycopg"
    assert resolve_url("postgres://demo@db/demo").drivername == "postgresql+psycopg"


def test_an_unreachable_database_is_a_storage_error():
    from harness.local_http import free_port

    with pytest.raises(StorageError, match="cannot open the conversation database"):
        open_database(f"postgresql+psycopg://nobody:hidden@127.0.0.1:{free_port()}/none?connect_timeout=5")


# ----- the store ---------------------------------------------------------------------------------------------------

def test_every_kind_of_message_round_trips_through_the_store(store):
    conversation = store.create("alice", "all_tools", settings={"temperature": 0.7, "tools": ["python"]})
    messages = every_kind_of_message()
    assert [store.append("alice", conversation, message) for message in messages] == list(range(len(messages)))
    stored = store.get("alice", conversation)
    assert stored.messages == messages
    assert (stored.owner, stored.page, stored.settings, stored.version, stored.message_count) == \
        ("alice", "all_tools", {"temperature": 0.7, "tools": ["python"]}, 1, len(messages))
    assert stored.created_at.tzinfo is UTC and stored.updated_at.tzinfo is UTC
    assert stored.created_at <= stored.updated_at <= datetime.now(UTC)
    nul = Message("user", "a NUL \x00 inside", display_text="and \x00 here")  # PostgreSQL text cannot hold NUL
    store.append("alice", conversation, nul)
    assert store.get("alice", conversation).messages[-1] == nul
    assert [item.id for item in store.list("alice", search="nul \x00 inside")] == [conversation]
    messages.append(nul)
    light = store.get("alice", conversation, with_messages=False)
    assert (light.messages, light.message_count, light.title) == ([], len(messages), stored.title)


def test_the_first_user_message_titles_an_untitled_conversation(store):
    untitled = store.create("alice", "chat")
    store.append("alice", untitled, Message("assistant", "Hello! How can I help?"))
    store.append("alice", untitled, Message("user", "\n   " + "word " * 30 + "\nsecond line"))
    store.append("alice", untitled, Message("user", "A later question"))
    assert store.get("alice", untitled).title == ("word " * 16).strip()  # the first line, 80 characters
    titled = store.create("alice", "chat", title="Mine")
    store.append("alice", titled, Message("user", "Something else"))
    assert store.get("alice", titled).title == "Mine"


def test_another_owners_conversation_behaves_like_a_missing_one(store):
    mine = store.create("alice", "chat")
    store.append("alice", mine, Message("user", "my secret plan"))
    attempts = {
        "get": lambda id: store.get("bob", id),
        "append": lambda id: store.append("bob", id, Message("user", "hi")),
        "truncate": lambda id: store.truncate("bob", id, 0, 1),
        "rename": lambda id: store.rename("bob", id, "taken", 1),
        "update_settings": lambda id: store.update_settings("bob", id, {"x": 1}),
        "delete": lambda id: store.delete("bob", id),
        "export_json": lambda id: store.export_json("bob", id),
        "export_markdown": lambda id: store.export_markdown("bob", id),
    }
    for name, attempt in attempts.items():
        errors = []
        for id in (mine, "00000000-0000-4000-8000-000000000000"):
            with pytest.raises(ConversationNotFound) as caught:
                attempt(id)
            errors.append(str(caught.value).replace(id, "<id>"))
        assert errors[0] == errors[1], name  # the same answer: nothing tells bob that alice's id exists
    assert store.list("bob") == [] and store.list("bob", search="secret") == []
    stored = store.get("alice", mine)
    assert (stored.title, stored.version, stored.settings, len(stored.messages)) == ("my secret plan", 1, {}, 1)
    assert [item.id for item in store.list("alice", search="secret")] == [mine]


def test_eight_threads_appending_at_once_lose_nothing_and_keep_their_order(store):
    conversation = store.create("alice", "chat")
    threads, per_thread = 8, 25
    seqs: dict[int, list[int]] = {}

    def append_many(worker: int) -> None:
        seqs[worker] = [store.append("alice", conversation, Message("user", f"{worker}:{index}"))
                        for index in range(per_thread)]

    assert at_once(threads, append_many) == []
    assert sorted(seq for values in seqs.values() for seq in values) == list(range(threads * per_thread))
    contents = [message.content for message in store.get("alice", conversation).messages]
    assert len(contents) == threads * per_thread
    for worker in range(threads):
        assert [c for c in contents if c.startswith(f"{worker}:")] == [f"{worker}:{i}" for i in range(per_thread)]
        assert seqs[worker] == sorted(seqs[worker])
    assert store.get("alice", conversation).version == 1  # appends are not edits


def test_truncate_refuses_to_drop_messages_the_caller_has_not_seen(store):
    conversation = store.create("alice", "chat")
    for content in ("q1", "a1"):
        store.append("alice", conversation, Message("user" if content.startswith("q") else "assistant", content))
    store.append("alice", conversation, Message("user", "q2 from another tab"))  # appends keep the version
    with pytest.raises(VersionConflict):
        store.truncate("alice", conversation, 1, expected_version=1, expected_count=2)  # this tab saw two
    assert [m.content for m in store.get("alice", conversation).messages] == ["q1", "a1", "q2 from another tab"]
    assert store.get("alice", conversation).version == 1  # the refused edit left no trace
    assert store.truncate("alice", conversation, 1, expected_version=1, expected_count=3) == 2


def test_truncate_deletes_the_dropped_messages_and_edits_check_the_version(store, engine):
    conversation = store.create("alice", "chat")
    for index in range(5):
        store.append("alice", conversation, Message("user" if index % 2 == 0 else "assistant", f"m{index}"))
    assert store.truncate("alice", conversation, 3, expected_version=1) == 2  # Regenerate: keep three
    assert [m.content for m in store.get("alice", conversation).messages] == ["m0", "m1", "m2"]
    with pytest.raises(VersionConflict) as conflict:
        store.truncate("alice", conversation, 1, expected_version=1)  # another tab's stale view
    assert (conflict.value.expected, conflict.value.actual) == (1, 2)
    with pytest.raises(VersionConflict):
        store.rename("alice", conversation, "stale", expected_version=1)
    assert [m.content for m in store.get("alice", conversation).messages] == ["m0", "m1", "m2"]  # unchanged

    assert store.append("alice", conversation, Message("assistant", "again")) == 5  # seqs are never reused
    assert store.truncate("alice", conversation, 10, expected_version=2) == 3  # nothing to drop; still an edit
    assert store.rename("alice", conversation, "  Two\nlines  ", expected_version=3) == 4
    stored = store.get("alice", conversation)
    assert ([m.content for m in stored.messages], stored.title, stored.version) == (
        ["m0", "m1", "m2", "again"], "Two lines", 4)
    with engine.connect() as connection:  # the dropped rows are gone (versions keep what the user may want back)
        rows = connection.execute(select(MessageRow.seq, MessageRow.deleted).where(
            MessageRow.conversation_id == conversation).order_by(MessageRow.seq)).all()
    assert rows == [(0, False), (1, False), (2, False), (5, False)]
    assert store.truncate("alice", conversation, 0, expected_version=4) == 5  # Clear
    assert store.get("alice", conversation).messages == []
    assert store.list("alice")[0].message_count == 0
    with pytest.raises(ValueError):
        store.truncate("alice", conversation, -1, expected_version=5)


def test_settings_replace_without_an_edit_and_delete_removes_the_messages(store, engine):
    conversation = store.create("alice", "chat", settings={"temperature": 0.2})
    store.append("alice", conversation, Message("user", "hi"))
    store.update_settings("alice", conversation, {"temperature": 0.9, "system_prompt": "Be kind."})
    stored = store.get("alice", conversation)
    assert (stored.settings, stored.version) == ({"temperature": 0.9, "system_prompt": "Be kind."}, 1)
    with pytest.raises(ValueError, match="JSON"):
        store.update_settings("alice", conversation, {"bad": float("nan")})
    store.delete("alice", conversation)
    with pytest.raises(ConversationNotFound):
        store.get("alice", conversation)
    with pytest.raises(ConversationNotFound):
        store.delete("alice", conversation)
    with engine.connect() as connection:  # ON DELETE CASCADE (SQLite: with foreign keys on)
        assert connection.scalar(select(func.count()).select_from(MessageRow)) == 0


def test_search_matches_titles_and_shown_messages_ignoring_case(store):
    def conversation(title: str, *texts: str, page: str = "chat") -> str:
        id = store.create("alice", page, title=title)
        for text in texts:
            store.append("alice", id, Message("user", text))
        return id

    holiday = conversation("Holiday plans", "Where to go?")
    report = conversation("", "The Quarterly REPORT is due")
    percent = conversation("Certainty", "I am 100% sure")
    thousand = conversation("Apples", "1000 apples")
    snake = conversation("Names", "use snake_case")
    ebc = conversation("Letters", "ebc")
    trouble = conversation("ÄRGER im Büro", "nothing here")
    tool = store.create("alice", "tools")
    store.append("alice", tool, Message("tool", "short", display_text="the full Output of a tool"))
    dropped = conversation("Dropped", "visible", "a SECRET word")
    store.truncate("alice", dropped, 1, expected_version=1)
    store.append("bob", store.create("bob", "chat"), Message("user", "The quarterly report of bob"))

    def found(term: str, **options) -> set[str]:
        return {item.id for item in store.list("alice", search=term, **options)}

    assert found("HOLIDAY") == {holiday}
    assert found("quarterly report") == {report} and report in found("quarterly", page="chat")
    assert found("100%") == {percent}  # % is a character, not a wildcard
    assert thousand in found("100") and percent in found("100")
    assert found("e_c") == {snake}  # _ too
    assert ebc not in found("e_c")
    assert found("ärger") == {trouble}  # non-ASCII case folding, in a title
    assert found("full output") == {tool} and found("full output", page="chat") == set()
    assert found("secret") == set()  # only in a truncated message
    assert found("  ") == found("") and len(found("")) == 9
    assert all(item.id != holiday for item in store.list("bob", search="holiday"))


def test_the_list_is_newest_first_and_pages(store):
    ids = [store.create("alice", "chat", title=f"c{index}") for index in range(5)]
    store.append("alice", ids[1], Message("user", "bump"))  # the most recent activity
    listed = store.list("alice")
    assert [item.id for item in listed] == [ids[1], ids[4], ids[3], ids[2], ids[0]]
    assert (listed[0].title, listed[0].page, listed[0].message_count) == ("c1", "chat", 1)
    assert listed[0].updated_at.tzinfo is UTC and listed[0].updated_at >= listed[1].updated_at
    assert [item.id for item in store.list("alice", limit=2, offset=2)] == [ids[3], ids[2]]
    assert store.list("alice", page="tools") == []
    with pytest.raises(ValueError):
        store.list("alice", limit=0)


# ----- export and import -------------------------------------------------------------------------------------------

def saved_conversation(store: ConversationStore) -> str:
    conversation = store.create("alice", "all_tools", title="Plot the sales",
                                settings={"system_prompt": "Be brief.", "tool_choice": "auto"})
    for message in every_kind_of_message():
        store.append("alice", conversation, message)
    return conversation


def test_an_export_imports_as_an_equal_conversation(store):
    original = saved_conversation(store)
    exported = store.export_json("alice", original)
    assert (exported["format"], exported["version"]) == ("composite-demo-conversation", 2)
    assert exported["messages"] == [message.to_openai() for message in every_kind_of_message()]
    assert exported["metadata"] == [encode_message(message) for message in every_kind_of_message()]
    raw = json.dumps(exported, indent=1).encode()  # as the page offers it for download
    copy = store.import_json("bob", raw)
    before, after = store.get("alice", original), store.get("bob", copy)
    assert copy != original
    assert (after.title, after.page, after.settings, after.messages, after.created_at) == \
        (before.title, before.page, before.settings, before.messages, before.created_at)
    assert (after.version, after.message_count) == (1, len(before.messages))
    assert store.append("bob", copy, Message("user", "more")) == len(before.messages)  # seqs continue
    assert store.export_markdown("alice", original).startswith("# Plot the sales\n\n## System\n\nBe brief.")
    assert store.get("bob", store.import_json("bob", raw, page="chat")).page == "chat"  # imported on that page


def test_pictures_thoughts_and_settings_survive_export_and_import(store):
    """What the strict checks must still let through: a user's picture (exported as an image_url part), a
    thought with its metrics, two calls of one answer and their results, and every setting."""
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), "teal").save(buffer, "PNG")
    messages = [
        Message("user", "What colour?", attachments=[Attachment("image", "photo.png", data=buffer.getvalue())]),
        Message("assistant", "", thinking="Teal, I think.", tool_calls=[ToolCall("a", {}, id="c1"),
                                                                        ToolCall("b", {"x": 1}, id="c2")],
                metrics=AnswerMetrics(thinking_tokens=4, thinking_time_s=0.5, finish_reason="tool_calls")),
        Message("tool", "1", tool_call_id="c2", name="b", tool_status="ok"),
        Message("tool", "2", tool_call_id="c1", name="a", tool_status="failed"),
        Message("assistant", "Teal.", thinking="Sure."),
    ]
    original = store.create("alice", "tools", settings={"system_prompt": "", "tool_choice": "a"})
    for message in messages:
        store.append("alice", original, message)
    exported = store.export_json("alice", original)
    assert exported["messages"][0]["content"][0]["type"] == "image_url"
    copy = store.get("alice", store.import_json("alice", json.dumps(exported).encode()))
    assert (copy.messages, copy.settings) == (messages, {"system_prompt": "", "tool_choice": "a"})
    without_metadata = json.dumps({**exported, "metadata": None}).encode()  # as any OpenAI-speaking tool writes it
    assert store.get("alice", store.import_json("alice", without_metadata)).messages[0].images[0].name == "image 1"


def test_a_stored_message_in_no_known_shape_is_unreadable_but_kept(store, engine):
    """Written before the strict import, or by hand: reading it says which message is wrong; the conversation
    can still be listed, renamed and deleted."""
    conversation = store.create("alice", "chat", title="Old")
    store.append("alice", conversation, Message("user", "fine"))
    with engine.begin() as connection:
        connection.execute(insert(MessageRow).values(conversation_id=conversation, seq=1, deleted=False,
                                                     search_text="", payload='{"role": "assistant", "content": [1]}',
                                                     created_at=datetime.now(UTC)))
    with pytest.raises(UnreadableConversation, match=r"messages\[1\]\.content: Input should be a valid string") \
            as caught:
        store.get("alice", conversation)
    kept = caught.value.stored
    assert (kept.id, kept.title, kept.message_count, kept.messages) == (conversation, "Old", 2, [])
    assert store.get("alice", conversation, with_messages=False).title == "Old"
    exported = store.export_json("alice", conversation)  # as stored, to look at or mend
    assert (exported["messages"], exported["metadata"]) == ([], [{"role": "user", "content": "fine"},
                                                                 {"role": "assistant", "content": [1]}])
    store.delete("alice", conversation)
    assert store.list("alice") == []


def test_stored_settings_are_used_one_by_one():
    assert SettingsRecord.usable({"system_prompt": ["a"], "tool_choice": "auto", "colour": 1}) == (
        {"tool_choice": "auto"},
        ["settings.system_prompt: Input should be a valid string", "settings.colour: Extra inputs are not permitted"])
    assert SettingsRecord.usable(["system_prompt"]) == ({}, ["settings: must be an object, not list"])


def test_plain_openai_messages_import_too(store):
    raw = json.dumps({"format": "composite-demo-conversation", "version": 1, "page": "chat", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
        {"role": "assistant", "content": None, "reasoning_content": "easy",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
    ]}).encode()
    stored = store.get("alice", store.import_json("alice", raw))
    assert stored.messages == [Message("user", "What is 2+2?"),
                               Message("assistant", "", tool_calls=[ToolCall("calc", {"x": 2}, id="c1")]),
                               Message("tool", "4", tool_call_id="c1")]
    assert stored.title == "" and stored.settings == {}


def _export(**changes) -> dict:
    document = {"format": "composite-demo-conversation", "version": 1, "title": "t", "page": "chat", "settings": {},
                "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "tool_call_id": "1"}],
                "metadata": [{"role": "user", "content": "hi"},
                             {"role": "tool", "content": "x", "tool_call_id": "1",
                              "attachments": [{"kind": "image", "name": "p.png", "data": "iVBORw0KGgo="}]}]}
    document.update(changes)
    return document


def _with_bad_base64() -> dict:
    document = _export()
    document["metadata"][1]["attachments"][0]["data"] = "iVBOR w0K!!"
    return document


def _calls(*messages: tuple[str, str]) -> dict:
    """A plain-OpenAI export of ("call", id) assistant calls and ("result", id) tool results."""
    made = [{"role": "assistant", "tool_calls": [{"id": id, "type": "function", "function": {"name": "f"}}]}
            if kind == "call" else {"role": "tool", "tool_call_id": id, "content": "ok"} for kind, id in messages]
    return _export(messages=[{"role": "user", "content": "go"}, *made], metadata=None)


def _with_metadata(**changes) -> dict:
    """The app's own format: a call and its result, `changes` made to the result's metadata record."""
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "ok", **changes}
    return _export(messages=[{"role": "assistant"}, {"role": "tool", "tool_call_id": "c1"}], metadata=[call, result])


IMPORT_REJECTIONS = {
    "not JSON": (b"{this is not json", "the file: Invalid JSON"),
    "not UTF-8": (b'{"format": "\xff\xfe"}', "the file: "),
    "a JSON list": (b"[]", "the file: Input should be an object"),
    "wrong format": (_export(format="other-app"), "format: Input should be 'composite-demo-conversation'"),
    "newer version": (_export(version=3), "version: Input should be 1 or 2"),
    "no messages": ({k: v for k, v in _export().items() if k != "messages"}, "messages: Field required"),
    "unknown key": (_export(colour="red"), "colour: Extra inputs are not permitted"),
    "wrong role": (_export(messages=[{"role": "robot", "content": "hi"}], metadata=None), "messages[0].role"),
    "wrong role in metadata": (_export(metadata=[{"role": "user"}, {"role": "wizard"}]), "metadata[1].role"),
    "roles do not match": (_export(metadata=[{"role": "user"}, {"role": "assistant"}]),
                           "metadata[1].role: 'assistant' does not match messages[1].role 'tool'"),
    "one metadata short": (_export(metadata=[{"role": "user"}]), "metadata: 1 entries for 2 messages"),
    "invalid base64": (_with_bad_base64(), "metadata[1].attachments[0].data: not valid base64"),
    "a string for a number": (_export(metadata=[{"role": "user", "metrics": {"prompt_tokens": "12"}},
                                                {"role": "tool"}]), "metadata[0].metrics.prompt_tokens"),
    "bad tool call arguments": (_export(messages=[{"role": "assistant", "tool_calls": [
        {"id": "1", "function": {"name": "f", "arguments": "{oops"}}]}], metadata=None),
        "messages[0]: tool call 'f': arguments are not valid JSON"),
    "too many messages": (_export(messages=[{"role": "user", "content": ""}] * 10_001, metadata=None),
                          "messages: more than 10,000 messages; at most that many can be imported"),
    "too many records": (_export(messages=[{"role": "user", "content": ""}] * 10_000,
                                 metadata=[{"role": "user"}] * 10_001), "metadata: more than 10,000 messages"),
    "over 50 MB": (b" " * (50 * 2**20 + 1), "at most 50 MB (52,428,800 bytes) can be imported"),
    # Settings are restored into the page's widgets: a list for the system prompt crashed every later open.
    "a list for the system prompt": (_export(settings={"system_prompt": ["Be", "brief"]}),
                                     "settings.system_prompt: Input should be a valid string"),
    "null for the tool choice": (_export(settings={"tool_choice": None}), "settings.tool_choice: Input should be"),
    "an unknown setting": (_export(settings={"temperature": 0.7}), "settings.temperature: Extra inputs are not"),
    "a number for a call id": (_export(messages=[{"role": "assistant", "tool_calls": [
        {"id": 1, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}], metadata=None),
        "messages[0].tool_calls[0].id: Input should be a valid string"),
    "an unknown key in a call": (_export(messages=[{"role": "assistant", "tool_calls": [
        {"id": "1", "function": {"name": "f"}, "colour": "red"}]}], metadata=None),
        "messages[0].tool_calls[0].colour: Extra inputs are not permitted"),
    "an image part of the wrong shape": (_export(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}], metadata=None),
        "messages[0].content[0].image_url: Input should be an object"),
    "a text part without text": (_export(messages=[{"role": "user", "content": [{"type": "text"}]}], metadata=None),
                                 'messages[0].content[0]: a part is {"type": "text", "text": ...}'),
    "an image that is no picture": (_with_metadata(attachments=[{"kind": "image", "name": "p.png",
                                                                 "data": "aGVsbG8="}]),
                                    "metadata[1].attachments[0].data: The data is not a PNG, JPEG, WebP or GIF"),
    "a result answering no call": (_calls(("call", "c1"), ("result", "c9")),
                                   "messages[2].tool_call_id: 'c9' answers no tool call made before it"),
    "a long id answering no call": (_calls(("call", "c1"), ("result", "x" * 100_000)),  # quoted short
                                    "messages[2].tool_call_id: 'xxxxxxxx"),
    "a result before its call": (_calls(("result", "c1"), ("call", "c1")),
                                 "messages[1].tool_call_id: 'c1' answers no tool call made before it"),
    "a call answered twice": (_calls(("call", "c1"), ("result", "c1"), ("result", "c1")),
                              "messages[3].tool_call_id: call 'c1' was already answered in messages[2]"),
    "a call id used twice": (_calls(("call", "c1"), ("result", "c1"), ("call", "c1")),
                             "messages[3].tool_calls[0].id: 'c1' is already the id of a call in messages[1]"),
    "a result naming no call": (_calls(("call", "c1"), ("result", "")),
                                "messages[2].tool_call_id: a tool message must name the call it answers"),
    "an orphan result in metadata": (_with_metadata(tool_call_id="c2"),
                                     "metadata[1].tool_call_id: 'c2' answers no tool call made before it"),
    "a user making a call": (_export(metadata=[{"role": "user", "tool_calls": [{"id": "c1", "name": "f"}]},
                                               {"role": "tool", "tool_call_id": "c1"}]),
                             "metadata[0].tool_calls: only assistant messages make tool calls"),
}


@pytest.mark.parametrize("case", IMPORT_REJECTIONS)
def test_a_wrong_file_is_rejected_saying_where_and_creates_nothing(store, engine, case):
    content, expected = IMPORT_REJECTIONS[case]
    raw = content if isinstance(content, bytes) else json.dumps(content).encode()
    with pytest.raises(ImportRejected) as rejected:
        store.import_json("alice", raw)
    assert expected in str(rejected.value)
    assert len(str(rejected.value)) < 1000  # a message to read, not a dump
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(ConversationRow)) == 0


def test_an_import_that_fails_in_the_database_creates_nothing(store, engine):
    raw = json.dumps(store.export_json("alice", saved_conversation(store))).encode()

    def fail_on_messages(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO MESSAGES"):
            raise OperationalError(statement, None, Exception("the disk is full"))

    event.listen(engine, "before_cursor_execute", fail_on_messages)
    try:
        with pytest.raises(StorageError, match="the disk is full"):
            store.import_json("alice", raw)
    finally:
        event.remove(engine, "before_cursor_execute", fail_on_messages)
    assert len(store.list("alice")) == 1  # the original only: the new conversation row was rolled back


def test_the_upload_limit_is_the_import_limit_and_the_docs_say_so():
    """Streamlit's per-file upload limit (MB) is the import's, so a file the import would take is never cut off by
    the uploader first, nor one it refuses stopped there with a different figure; the chat's own limits on one
    attached file lie below it, so that their messages (what to do about it) are the ones a user sees."""
    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]
    limit_mb = server["maxUploadSize"]
    assert limit_mb * 2**20 == MAX_IMPORT_BYTES
    chat_page = (ROOT / "docs" / "chat.md").read_text()  # its history section: importing a conversation
    assert f"at most {MAX_IMPORT_BYTES // 2**20} MB" in chat_page and "maxUploadSize" in chat_page
    assert MAX_DOCUMENT_BYTES <= MAX_IMPORT_BYTES and ImageSettings().max_mb * 2**20 <= MAX_IMPORT_BYTES
