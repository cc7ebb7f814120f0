"""Organising the history (app/storage/folders.py, ConversationStore's pins, folders and tags), on SQLite and
PostgreSQL: folders made, renamed and deleted with or without their conversations; pins first; tags filtered;
search across all of them; every owner apart; and migration 0012 upgrading a database with conversations in it,
losing nothing, and downgrading without losing a message."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from app.domain.conversation import Message
from app.storage import ConversationNotFound, ConversationStore
from app.storage.folders import MAX_TAGS, FolderRefused, FolderStore
from app.storage.migrate import current_revision, head_revision, upgrade_to_head
from tests.database import engine_at, migrate, old_conversation, old_texts, schema_differences


@pytest.fixture
def stores(engine) -> tuple[ConversationStore, FolderStore]:
    return ConversationStore(engine), FolderStore(engine)


def _conversation(store: ConversationStore, owner: str, title: str, text: str, page: str = "chat") -> str:
    made = store.create(owner, page, title=title)
    store.append(owner, made, Message("user", text))
    return made


def _titles(store: ConversationStore, owner: str = "alice", **filters) -> list[str]:
    return [item.title for item in store.list(owner, page="chat", **filters)]


def test_folders_pins_and_tags_organise_the_list_and_search_crosses_them(stores):
    store, folders = stores
    old = _conversation(store, "alice", "Tax return", "receipts for the tax office")
    mid = _conversation(store, "alice", "Holiday plan", "train to Lisbon")
    new = _conversation(store, "alice", "Recipe", "lentil soup with cumin")
    work = folders.create("alice", "Work")
    store.move("alice", old, work.id)
    store.set_pinned("alice", mid, True)
    assert store.set_tags("alice", new, ["Food", " food ", "#soup", ""]) == ["food", "soup"]
    store.set_tags("alice", old, ["money"])

    assert _titles(store) == ["Holiday plan", "Recipe", "Tax return"]  # the pin first, then newest first
    listed = {item.title: item for item in store.list("alice", page="chat")}
    assert listed["Tax return"].folder_id == work.id and listed["Holiday plan"].pinned
    assert listed["Recipe"].tags == ("food", "soup") and listed["Holiday plan"].tags == ()
    assert _titles(store, folder=work.id) == ["Tax return"]
    assert _titles(store, folder=None) == ["Holiday plan", "Recipe"]  # in no folder
    assert _titles(store, tag="soup") == ["Recipe"] and _titles(store, tag="nothing") == []
    assert _titles(store, search="lisbon") == ["Holiday plan"] and _titles(store, search="TAX OFFICE") == ["Tax return"]
    assert _titles(store, search="cumin", folder=work.id) == []
    assert store.tags("alice") == [("food", 1), ("money", 1), ("soup", 1)]
    assert [(f.name, f.conversations) for f in folders.list("alice", page="chat")] == [("Work", 1)]
    tools = _conversation(store, "alice", "Tool run", "sum these", page="tools")
    store.move("alice", tools, work.id)
    assert [(f.conversations, f.every_page) for f in folders.list("alice", page="chat")] == [(1, 2)]
    store.move("alice", tools, None)

    # Organising does not reorder by time, nor move the version another tab edits against.
    before = store.get("alice", old, with_messages=False)
    store.set_pinned("alice", old, True)
    after = store.get("alice", old, with_messages=False)
    assert (after.version, after.updated_at) == (before.version, before.updated_at)
    assert _titles(store)[:2] == ["Holiday plan", "Tax return"]  # two pins: the newer first


def test_folders_are_each_owners_and_refuse_what_cannot_be(stores):
    store, folders = stores
    mine = _conversation(store, "alice", "Mine", "hello")
    work = folders.create("alice", "Work")
    with pytest.raises(FolderRefused, match="already"):
        folders.create("alice", " work ")  # the same name in other letters
    theirs = folders.create("bob", "Work")  # another owner's may share the name
    with pytest.raises(FolderRefused, match="does not exist"):
        store.move("alice", mine, theirs.id)
    with pytest.raises(ConversationNotFound):
        store.move("bob", mine, theirs.id)
    with pytest.raises(ConversationNotFound):
        store.set_pinned("bob", mine, True)
    with pytest.raises(ConversationNotFound):
        store.set_tags("bob", mine, ["x"])
    with pytest.raises(FolderRefused, match="at most 10 tags"):
        store.set_tags("alice", mine, [f"tag {n}" for n in range(MAX_TAGS + 1)])
    with pytest.raises(FolderRefused, match="at most 40 characters"):
        store.set_tags("alice", mine, ["x" * 41])
    with pytest.raises(FolderRefused, match="needs a name"):
        folders.create("alice", " \x00\n ")
    folders.rename("alice", work.id, "Office")
    with pytest.raises(FolderRefused, match="already"):
        folders.rename("alice", folders.create("alice", "Home").id, "office")
    with pytest.raises(FolderRefused, match="does not exist"):
        folders.rename("bob", work.id, "Taken over")
    assert [f.name for f in folders.list("alice")] == ["Home", "Office"] and [f.name for f in folders.list("bob")] == [
        "Work"]


def test_a_folder_is_deleted_with_or_without_its_conversations(stores):
    store, folders = stores
    kept_out, gone = (_conversation(store, "alice", title, title) for title in ("Moved out", "Deleted with it"))
    first, second = folders.create("alice", "First"), folders.create("alice", "Second")
    store.move("alice", kept_out, first.id)
    store.move("alice", gone, second.id)
    store.set_tags("alice", gone, ["old"])
    assert folders.delete("alice", first.id) == 1
    assert store.list("alice", folder=None)[0].title == "Moved out"  # outside any folder now, with its messages
    assert [m.content for m in store.get("alice", kept_out).messages] == ["Moved out"]
    assert folders.delete("alice", second.id, with_conversations=True) == 1
    with pytest.raises(ConversationNotFound):
        store.get("alice", gone)
    assert store.tags("alice") == [] and folders.list("alice") == []
    with pytest.raises(FolderRefused, match="does not exist"):
        folders.delete("alice", second.id)
    with pytest.raises(FolderRefused, match="does not exist"):  # a move into a folder deleted meanwhile
        store.move("alice", kept_out, second.id)
    other = _conversation(store, "bob", "Bob's", "hi")
    bobs = folders.create("bob", "Bob's folder")
    store.move("bob", other, bobs.id)
    with pytest.raises(FolderRefused):
        folders.delete("alice", bobs.id, with_conversations=True)
    assert store.get("bob", other).title == "Bob's"


def test_a_conversation_whose_folder_is_gone_is_listed_as_in_no_folder(stores, engine):
    from sqlalchemy import update

    from app.storage.tables import ConversationRow

    store, _ = stores
    stray = _conversation(store, "alice", "Stray", "hello")
    with engine.begin() as connection:  # as a database edited by hand, or an older race, could leave it
        connection.execute(update(ConversationRow).where(ConversationRow.id == stray).values(folder_id="gone"))
    assert [item.title for item in store.list("alice", folder=None)] == ["Stray"]


def test_upgrading_from_0011_keeps_every_conversation_and_downgrading_keeps_every_message(database_url):
    engine = engine_at(database_url, "0011")
    try:
        kept = [old_conversation(engine, "alice", f"Before {n}", [f"Question {n}", f"Answer {n}"]) for n in range(3)]
        upgrade_to_head(engine)  # what open_database does when the app starts on the old database
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()
        assert schema_differences(engine) == []
        store = ConversationStore(engine)
        listed = store.list("alice")
        assert sorted(item.title for item in listed) == ["Before 0", "Before 1", "Before 2"]
        assert all(not item.pinned and item.folder_id is None and item.tags == () for item in listed)
        assert [m.content for m in store.get("alice", kept[0]).messages] == ["Question 0", "Answer 0"]
        folder = FolderStore(engine).create("alice", "Kept")
        store.move("alice", kept[1], folder.id)
        store.set_tags("alice", kept[2], ["x"])

        migrate(engine, "downgrade", "0011")  # and back: the organising goes, no message with it
        assert {"folders", "conversation_tags"}.isdisjoint(inspect(engine).get_table_names())
        assert [old_texts(engine, conversation) for conversation in kept] == [
            [f"Question {n}", f"Answer {n}"] for n in range(3)]
    finally:
        engine.dispose()
