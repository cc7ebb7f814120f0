"""A user's last settings come back after a refresh: the `preferences` table (migration 0002), the store's
get_preferences / set_preferences, and PreferencesRecord's checks. On SQLite and on a real PostgreSQL server, and
the upgrade from 0001 with conversations already saved."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, inspect

from app.storage import ConversationStore, open_database
from app.storage.migrate import current_revision, head_revision, upgrade_to_head
from app.storage.schema import PreferencesRecord
from app.storage.tables import PreferencesRow
from tests.database import engine_at, migrate, old_conversation, old_texts, schema_differences
from tests.helpers import at_once

EVERY_PREFERENCE = {"backend": "hf", "system_prompt": "Be brief.", "temperature": 0.2, "top_p": 0.95, "top_k": 40,
                    "repetition_penalty": 1.1, "max_new_tokens": 1024, "seed": 1234, "thinking": "On",
                    "dark_mode": True}


@pytest.fixture
def store(database_url: str) -> Iterator[ConversationStore]:  # SQLite and PostgreSQL
    engine = open_database(database_url)
    yield ConversationStore(engine)
    engine.dispose()


def test_preferences_are_empty_until_set_and_then_come_back(store):
    assert store.get_preferences("alice") == {}
    store.set_preferences("alice", EVERY_PREFERENCE)
    assert store.get_preferences("alice") == EVERY_PREFERENCE
    assert store.get_preferences("bob") == {}  # one owner's are not another's
    store.set_preferences("alice", {"temperature": 1, "seed": None})  # replaced, not merged
    again = store.get_preferences("alice")
    assert again == {"temperature": 1.0, "seed": None} and isinstance(again["temperature"], float)
    store.set_preferences("alice", {})
    assert store.get_preferences("alice") == {}
    with pytest.raises(ValueError, match="owner"):
        store.get_preferences("")
    with pytest.raises(ValueError, match="dict"):
        store.set_preferences("alice", ["temperature"])  # type: ignore[arg-type]


def test_unknown_keys_and_wrong_values_are_dropped_and_named(store, caplog):
    given = {"temperature": "0.7", "top_k": 1.5, "dark_mode": 1, "seed": -1, "top_p": 0.0, "colour": "red",
             "max_new_tokens": 256, "system_prompt": None}
    with caplog.at_level(logging.WARNING, logger="app.storage.repository"):
        store.set_preferences("alice", given)
    assert store.get_preferences("alice") == {"max_new_tokens": 256}
    for name in ("temperature", "top_k", "dark_mode", "seed", "top_p", "colour", "system_prompt"):
        assert f"preferences.{name}:" in caplog.text


def test_usable_preferences_are_named_like_usable_settings():
    assert PreferencesRecord.usable({"top_k": "40", "seed": None, "thinking": "Off", "colour": 1}) == (
        {"seed": None, "thinking": "Off"},
        ["preferences.top_k: Input should be a valid integer", "preferences.colour: Extra inputs are not permitted"])
    assert PreferencesRecord.usable([1]) == ({}, ["preferences: must be an object, not list"])
    assert PreferencesRecord.usable({"temperature": float("nan")})[0] == {}
    assert PreferencesRecord.usable({"repetition_penalty": 5.5})[1] == [
        "preferences.repetition_penalty: Input should be less than or equal to 5"]


def test_a_stored_preference_no_longer_valid_is_left_out(store):
    """Written by another version of the app (or by hand): what is still valid comes back."""
    with store.engine.begin() as connection:
        connection.execute(insert(PreferencesRow).values(owner="alice", updated_at=datetime.now(UTC),
                                                         settings={"top_k": "many", "seed": 7, "old": True}))
    assert store.get_preferences("alice") == {"seed": 7}
    with store.engine.begin() as connection:
        connection.execute(PreferencesRow.__table__.update().values(settings=["not", "an", "object"]))
    assert store.get_preferences("alice") == {}


def test_many_threads_saving_preferences_at_once_all_succeed(store):
    threads, rounds = 6, 10

    def save(worker: int) -> None:
        for index in range(rounds):
            store.set_preferences("alice", {"seed": worker * 100 + index})

    assert at_once(threads, save) == []
    assert store.get_preferences("alice")["seed"] % 100 == rounds - 1  # someone's last


# ----- the migration -----------------------------------------------------------------------------------------------

def test_upgrading_from_0001_keeps_the_conversations_and_adds_preferences(database_url):
    engine = engine_at(database_url, "0001")
    try:
        assert "preferences" not in inspect(engine).get_table_names()
        store = ConversationStore(engine)
        kept = old_conversation(engine, "alice", "Before the upgrade", ["Hello", "Hi!"],
                                settings={"system_prompt": "Be brief."})

        upgrade_to_head(engine)  # what open_database does when the app starts on the old database
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()  # whatever came after, too
        assert schema_differences(engine) == []  # the migrations make what the models declare
        stored = store.get("alice", kept)
        assert (stored.title, stored.settings, [m.content for m in stored.messages]) == (
            "Before the upgrade", {"system_prompt": "Be brief."}, ["Hello", "Hi!"])
        store.set_preferences("alice", {"temperature": 0.3})
        assert store.get_preferences("alice") == {"temperature": 0.3}

        migrate(engine, "downgrade", "0001")  # and back: the preferences go, the conversations stay
        assert "preferences" not in inspect(engine).get_table_names()
        assert old_texts(engine, kept) == ["Hello", "Hi!"]
        upgrade_to_head(engine)
        assert store.get_preferences("alice") == {}
    finally:
        engine.dispose()
