"""Export and import give back the conversation that was saved: generated conversations (pictures of every kind
the app shows, documents, thoughts, metrics, errors, tool calls (some edited by the user) and results with plots
and structured results (some declined), unicode and empty texts, and versions: the other branches kept where a
message was edited or an answer regenerated) go through the real store (SQLite file; one rich example on
PostgreSQL too), export_json, JSON text and import_json, and come back equal.

Also: the import's guards on versions (a hostile file nested deep or holding too many messages is refused quickly,
saying where; call ids are checked per branch; version_index in range)."""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from app.domain.conversation import AnswerMetrics, Attachment, Conversation, Message, ToolCall
from app.storage import ConversationStore, ImportRejected, open_database
from app.storage.codec import decode_message_json, encode_message_json
from app.storage.transfer import FORMAT_VERSION, MAX_ALL_MESSAGES, MAX_VERSION_DEPTH


def _picture(kind: str, size: tuple[int, int] = (7, 5), noise: bool = False) -> bytes:
    if noise:
        image = Image.frombytes("RGB", size, random.Random(size[0]).randbytes(size[0] * size[1] * 3))
    else:
        image = Image.new("RGBA" if kind in ("PNG", "WEBP") else "RGB", size, (0, 128, 128, 200))
    if kind == "GIF":
        image = image.convert("P")
    buffer = io.BytesIO()
    image.save(buffer, kind)
    return buffer.getvalue()


# What the app holds as pictures: a user's upload re-encoded (PNG or JPEG), a generated picture as the image
# service sent it (WebP, GIF), a plot (PNG), a photo (a large JPEG of noise, which does not compress).
PICTURES = [_picture("PNG"), _picture("JPEG"), _picture("WEBP"), _picture("GIF"), _picture("PNG", (1, 1)),
            _picture("JPEG", (600, 400), noise=True)]

_texts = st.text(max_size=40) | st.sampled_from(["", " ", "\n", "Grüße 👋🏽 中文 \u202e rtl", "a\x00b", "```"])
_floats = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
_names = st.text(min_size=1, max_size=12)
_json_values = st.recursive(st.none() | st.booleans() | st.integers() | _floats | _texts,
                            lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_texts, inner, max_size=2),
                            max_leaves=5)


def _metrics(finish_reason: str | None = None) -> st.SearchStrategy[AnswerMetrics]:
    reasons = st.just(finish_reason) if finish_reason else st.sampled_from(
        [None, "stop", "length", "cancelled", "tool_calls", "error"])
    return st.builds(AnswerMetrics, prompt_tokens=st.integers(0, 2**40), completion_tokens=st.integers(0, 2**40),
                     time_to_first_token_s=st.none() | _floats, tokens_per_second=st.none() | _floats,
                     total_time_s=_floats, finish_reason=reasons, dropped_messages=st.integers(0, 10**6),
                     thinking_tokens=st.integers(0, 10**6), thinking_time_s=st.none() | _floats,
                     cached_tokens=st.integers(0, 10**6))


_images = st.builds(Attachment, kind=st.just("image"), name=_texts, data=st.sampled_from(PICTURES), note=_texts)
_documents = st.builds(Attachment, kind=st.just("document"), name=_texts, text=_texts, note=_texts)


class _Ids:
    """Call ids unique in the whole generated conversation (so unique along every path of it)."""

    def __init__(self) -> None:
        self.count = 0

    def new(self, draw: st.DrawFn) -> str:
        self.count += 1
        return draw(st.sampled_from(["call_", "", "ид-", "x" * 30])) + str(self.count)


def _user(draw: st.DrawFn) -> Message:
    attachments = draw(st.lists(_images, max_size=3)) + draw(st.lists(_documents, max_size=2))
    return Message("user", draw(_texts), attachments=attachments)


def _answer(draw: st.DrawFn, ids: _Ids) -> list[Message]:
    """One answer: an error, or a reply with its thought, possibly after tool calls and their results."""
    if draw(st.integers(0, 5)) == 0:  # a backend that failed (a text-only model refusing a picture, ...)
        return [Message("assistant", draw(_texts), error=draw(_names),
                        metrics=draw(st.none() | _metrics("error")))]
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 2))):
        calls = [ToolCall(draw(_names), draw(st.dictionaries(_texts, _json_values, max_size=2)), id=ids.new(draw),
                          edited_from=draw(st.none() | st.dictionaries(_texts, _json_values, max_size=2)))
                 for _ in range(draw(st.integers(1, 2)))]
        messages.append(Message("assistant", draw(_texts), tool_calls=calls, thinking=draw(_texts),
                                metrics=draw(_metrics("tool_calls"))))
        for call in draw(st.permutations(calls)):
            messages.append(Message(
                "tool", draw(_texts), tool_call_id=call.id, name=draw(st.none() | st.just(call.name)),
                tool_status=draw(st.sampled_from(["ok", "failed", "stopped", "denied"])),
                duration_s=draw(st.none() | _floats),
                display_text=draw(st.none() | _texts), attachments=draw(st.lists(_images, max_size=2)),
                structured=draw(st.none() | st.dictionaries(_texts, _json_values, max_size=2))))
    messages.append(Message("assistant", draw(_texts), thinking=draw(_texts), metrics=draw(st.none() | _metrics()),
                            error=draw(st.none() | _texts)))  # stopped: finish_reason "cancelled" with its error
    return messages


def _branch(draw: st.DrawFn, ids: _Ids, depth: int, start: str, head_versions: bool) -> list[Message]:
    """Turns starting with a user message or an answer; where a user message or an answer begins there may be
    versions (the other branches from there on), each generated the same way, one level deeper."""
    messages: list[Message] = []
    kind = start
    for turn in range(draw(st.integers(1, 3))):
        first = len(messages)
        messages.extend([_user(draw)] if kind == "user" else _answer(draw, ids))
        # A version's own first message holds no versions: they are all listed where it replaces the others.
        if depth < 3 and (turn > 0 or head_versions) and draw(st.integers(0, 3)) == 0:
            head = messages[first]
            head.versions = [_branch(draw, ids, depth + 1, kind, head_versions=False)
                             for _ in range(draw(st.integers(1, 2)))]
            head.version_index = draw(st.integers(0, len(head.versions)))
        kind = "answer" if kind == "user" else "user"
    return messages


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    ids = _Ids()
    system = [Message("system", draw(_texts))] if draw(st.booleans()) else []
    return system + _branch(draw, ids, 0, "user", head_versions=True)


def _round_trip(store: ConversationStore, messages: list[Message], page: str = "all_tools") -> list[Message]:
    """Saved message by message (as the pages save), exported, written as the download offers it, imported."""
    original = store.create("alice", page, title="Round trip", settings={"system_prompt": "Be brief.",
                                                                         "tool_choice": "auto"})
    for message in messages:
        store.append("alice", original, message)
    exported = store.export_json("alice", original)
    assert exported["version"] == FORMAT_VERSION == 2
    assert exported["messages"] == [message.to_openai() for message in messages]  # the branch on screen only
    copy = store.import_json("alice", json.dumps(exported, indent=1).encode())
    imported = store.get("alice", copy)
    assert (imported.title, imported.settings) == ("Round trip", {"system_prompt": "Be brief.", "tool_choice": "auto"})
    return imported.messages


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationStore]:
    engine = open_database(f"sqlite:///{tmp_path_factory.mktemp('roundtrip') / 'conversations.db'}")
    yield ConversationStore(engine)
    engine.dispose()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=conversations())
def test_any_conversation_survives_export_and_import(sqlite_store, messages):
    assert _round_trip(sqlite_store, messages) == messages


def rich_conversation() -> list[Message]:
    """What a session that used everything leaves: a picture and a document, tool calls with a plot, a stopped
    answer, a picture refused by a text-only model, and versions (an edit and a regeneration, one inside another)."""
    photo, plot = PICTURES[5], PICTURES[0]
    conversation = Conversation()
    conversation.add(Message("system", "Be brief."))
    conversation.add(Message("user", "", attachments=[Attachment("image", "photo.jpg", data=photo),
                                                      Attachment("document", "notes.md", text="# Notes")]))
    conversation.add(Message("assistant", "", error="This model reads text only: pictures cannot be sent to it.",
                             metrics=AnswerMetrics(finish_reason="error")))
    conversation.new_version(2)  # "Answer the text only"
    conversation.add(Message("assistant", "", thinking="Let me plot.", tool_calls=[ToolCall("python", {"c": 1},
                                                                                            id="call_1")],
                             metrics=AnswerMetrics(12, 30, 0.2, 40.0, 1.0, "tool_calls", 1, 5, 0.1, 8)))
    conversation.add(Message("tool", "[plot]", tool_call_id="call_1", name="python", tool_status="ok",
                             duration_s=0.5, display_text="full output", attachments=[
                                 Attachment("image", "Figure 1", data=plot)]))
    conversation.add(Message("assistant", "Here", metrics=AnswerMetrics(finish_reason="cancelled"),
                             error="Stopped by you."))
    conversation.add(Message("user", "Again, in Grüße 👋"))
    conversation.add(Message("assistant", "Sure."))
    conversation.new_version(2)  # regenerated once more: the same call id again, in another branch
    conversation.add(Message("assistant", "", tool_calls=[ToolCall("python", {"c": 2}, id="call_1")]))
    conversation.add(Message("tool", "", tool_call_id="call_1", tool_status="failed",
                             attachments=[Attachment("image", "gen.webp", data=PICTURES[2])]))
    conversation.switch_version(2, 2)  # back to the second answer, which holds the edit below
    conversation.new_version(5)  # the user edits "Again"
    conversation.add(Message("user", "Once more", attachments=[Attachment("image", "a.gif", data=PICTURES[3])]))
    assert conversation.version_count(2) == (2, 3) and conversation.version_count(5) == (2, 2)
    return conversation.messages


def test_a_rich_conversation_with_versions_survives_export_and_import(store):  # SQLite and PostgreSQL
    messages = rich_conversation()
    assert _round_trip(store, messages) == messages
    # Switching versions after the round trip works as before it.
    copy = Conversation(messages=_round_trip(store, messages))
    copy.switch_version(2, 1)
    assert copy.messages[2].error and copy.version_count(2) == (1, 3)


@pytest.fixture
def store(database_url: str) -> Iterator[ConversationStore]:
    engine = open_database(database_url)
    yield ConversationStore(engine)
    engine.dispose()


# ----- versions in the stored record --------------------------------------------------------------------------

def test_versions_are_kept_in_the_stored_record_and_change_its_text():
    messages = rich_conversation()
    for message in messages:
        assert decode_message_json(encode_message_json(message)) == message
    plain = Message("user", "hi")
    assert "versions" not in encode_message_json(plain) and "version_index" not in encode_message_json(plain)
    switched = Message("user", "hi", versions=[[Message("user", "hello")]], version_index=1)
    texts = {encode_message_json(m) for m in (plain, switched, Message("user", "hi", versions=switched.versions))}
    assert len(texts) == 3  # what app/frontends/streamlit/persistence.py fingerprints: a switch is a change to save


# ----- the import's guards on versions ------------------------------------------------------------------------

def _document(metadata: list[dict], version: int = 2) -> bytes:
    messages = [{"role": record["role"], "content": record.get("content", "")} for record in metadata]
    return json.dumps({"format": "composite-demo-conversation", "version": version, "page": "chat",
                       "messages": messages, "metadata": metadata}).encode()


def _nested(depth: int) -> dict:
    """A first message whose version's second message has a version whose second message ... `depth` + 1 deep."""
    record: dict = {"role": "assistant", "content": "deepest"}
    for _ in range(depth):
        record = {"role": "assistant", "content": "x", "versions": [[{"role": "user"}, record]]}
    return {"role": "user", "content": "top", "versions": [[{"role": "user"}, record]], "version_index": 1}


def _rejected(store: ConversationStore, raw: bytes) -> str:
    with pytest.raises(ImportRejected) as rejected:
        store.import_json("mallory", raw)
    assert store.list("mallory") == []  # nothing created
    message = str(rejected.value)
    assert len(message) < 1000, message
    return message


def test_a_hostile_deeply_nested_file_is_refused_quickly_saying_so(sqlite_store):
    for depth in (100_000, 1_500_000):  # far beyond any parser's recursion; the second just under 50 MB
        raw = (b'{"format": "composite-demo-conversation", "version": 2, "page": "chat", "messages": [], '
               b'"metadata": [' + b'{"role":"user","versions":[[' * depth + b'{"role":"user"}'
               + b']]}' * depth + b"]}")
        started = time.perf_counter()
        with pytest.raises(ImportRejected, match=r"nested too deeply") as rejected:
            sqlite_store.import_json("mallory", raw)
        assert time.perf_counter() - started < 2
        assert "line 1 column" in str(rejected.value) and len(str(rejected.value)) < 1000
    # Just past the limit: the JSON reads, the versions are refused with where.
    message = _rejected(sqlite_store, _document([_nested(MAX_VERSION_DEPTH)]))
    assert message.startswith("metadata[0].versions[0][1].versions[0][1]") and \
        f"versions nest at most {MAX_VERSION_DEPTH} deep" in message
    # At the limit it is taken.
    kept = sqlite_store.import_json("alice", _document([_nested(MAX_VERSION_DEPTH - 1)]))
    sqlite_store.delete("alice", kept)


def test_a_file_with_too_many_messages_in_all_its_versions_is_refused(sqlite_store):
    per_version = 1_000
    versions = [[{"role": "user"}] * per_version for _ in range(MAX_ALL_MESSAGES // per_version + 1)]
    raw = _document([{"role": "user", "versions": versions}])
    started = time.perf_counter()
    message = _rejected(sqlite_store, raw)
    assert time.perf_counter() - started < 5
    assert f"more than {MAX_ALL_MESSAGES:,} messages" in message and message.startswith("metadata")


VERSION_REJECTIONS = {
    "a version_index past the versions": (
        [{"role": "user", "versions": [[{"role": "user"}]], "version_index": 2}],
        "metadata[0].version_index: 2 is out of range: this message and its 1 other version are places 0 to 1"),
    "a version_index without versions": ([{"role": "user", "version_index": 1}],
                                         "metadata[0].version_index: 1 is out of range: with no other versions"),
    "a negative version_index": ([{"role": "user", "versions": [[{"role": "user"}]], "version_index": -1}],
                                 "metadata[0].version_index"),
    "an empty version": ([{"role": "user", "versions": [[]]}], "metadata[0].versions[0]: List should have at least"),
    "versions on a version's first message": (
        [{"role": "user", "versions": [[{"role": "user", "versions": [[{"role": "user"}]]}]]}],
        "metadata[0].versions[0][0].versions: a version's first message holds no versions"),
    "a call id repeated within one branch": (
        [{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]},
         {"role": "tool", "tool_call_id": "c1"}, {"role": "user"},
         {"role": "assistant", "content": "", "versions": [[
             {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]}]]}],
        "metadata[4].versions[0][0].tool_calls[0].id: 'c1' is already the id of a call in metadata[1]"),
    "a result answering a call of another branch": (
        [{"role": "user"}, {"role": "assistant", "versions": [[
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]}]]},
         {"role": "tool", "tool_call_id": "c1"}],
        "metadata[2].tool_call_id: 'c1' answers no tool call made before it"),
    "a picture that is not one, in a version": (
        [{"role": "user", "versions": [[{"role": "user", "attachments": [
            {"kind": "image", "name": "p", "data": "aGVsbG8="}]}]]}],
        "metadata[0].versions[0][0].attachments[0].data: The data is not a PNG"),
    "versions in a version 1 file": ([{"role": "user", "versions": [[{"role": "user"}]]}],
                                     "metadata[0].versions: format version 1 has no versions"),
}


@pytest.mark.parametrize("case", VERSION_REJECTIONS)
def test_a_wrong_version_is_rejected_saying_where(sqlite_store, case):
    metadata, expected = VERSION_REJECTIONS[case]
    raw = _document(metadata, version=1 if "version 1" in case else 2)
    assert expected in _rejected(sqlite_store, raw)


def test_each_branch_is_checked_on_its_own(sqlite_store):
    """Regenerating an answer that called a tool: both branches may hold the same call ids (each path from the
    first message through the chosen versions is a conversation of its own), and each answers its own calls."""
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]}
    metadata = [{"role": "user"}, {**call, "versions": [[call, {"role": "tool", "tool_call_id": "c1"}]]},
                {"role": "tool", "tool_call_id": "c1"}]
    copy = sqlite_store.get("alice", sqlite_store.import_json("alice", _document(metadata)))
    assert copy.messages[1].versions[0][1].tool_call_id == "c1"
    sqlite_store.delete("alice", copy.id)


def test_a_version_1_file_still_imports(sqlite_store):
    raw = _document([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], version=1)
    copy = sqlite_store.get("alice", sqlite_store.import_json("alice", raw))
    assert copy.messages == [Message("user", "hi"), Message("assistant", "hello")]
    sqlite_store.delete("alice", copy.id)


def test_settings_the_import_would_refuse_are_left_out_of_the_export(sqlite_store):
    """A conversation's stored settings may hold what no page restores (a widget's None, a key of another version):
    the export carries those the pages use, so that the app takes its own file back."""
    original = sqlite_store.create("alice", "tools", settings={"system_prompt": "Be brief.", "tool_choice": None,
                                                               "temperature": 0.7})
    sqlite_store.append("alice", original, Message("user", "hi"))
    exported = sqlite_store.export_json("alice", original)
    assert exported["settings"] == {"system_prompt": "Be brief."}
    copy = sqlite_store.get("alice", sqlite_store.import_json("alice", json.dumps(exported).encode()))
    assert (copy.settings, copy.messages) == ({"system_prompt": "Be brief."}, [Message("user", "hi")])
    for id in (original, copy.id):
        sqlite_store.delete("alice", id)


def test_an_import_keeps_when_calls_were_asked_about_but_no_trace_id(sqlite_store):
    """A trace id names a trace in the writer's process: imported, it could open another user's timeline there."""
    messages = [Message("user", "Add"), Message("assistant", "", trace_id="ab" * 16, tool_calls=[
        ToolCall("add", {"a": 1}, id="call_9", asked_at=1_790_000_000.5)])]
    (_, answer) = _round_trip(sqlite_store, messages)
    assert answer.trace_id == "" and answer.tool_calls[0].asked_at == 1_790_000_000.5
