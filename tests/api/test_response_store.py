"""The API server's stored responses (app/storage/responses.py, table api_responses from migration 0003): the round
trip, owners, chains and their history, deletion, retention, input item pages, concurrency and the migration. On
SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import json
import logging
import math
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from openai.types.responses import Response
from sqlalchemy import Engine, event, func, insert, inspect, select
from sqlalchemy.exc import OperationalError

from app.config import ResponseStoreSettings
from app.storage import (
    ConversationStore,
    ResponseChainTooLarge,
    ResponseChainTooLong,
    ResponseNotFound,
    ResponseStore,
    StorageError,
    StoredResponse,
)
from app.storage import responses as responses_module
from app.storage.migrate import current_revision, head_revision, upgrade_to_head
from app.storage.tables import ApiResponseRow
from tests.database import engine_at, migrate, old_conversation, old_texts, schema_differences
from tests.helpers import at_once

ALICE, BOB = "a" * 64, "b" * 64  # owners as the endpoint makes them: SHA-256 hex of an API key
UNICODE = 'Grüße, 世界 🌍 — "quoted" \\ back\\slash, tab\t, NUL \x00, \u2028 line separator'


@pytest.fixture
def store(engine: Engine) -> ResponseStore:
    return ResponseStore(engine, ResponseStoreSettings())


def response(id: str, text: str = "", created_at: float | None = None, **fields: Any) -> dict[str, Any]:
    """A Response as the endpoint stores it (the openai model, dumped as JSON) with one output message."""
    output = [{"type": "message", "id": f"msg_out_{id}", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text or f"answer {id}", "annotations": []}]}]
    return Response.model_validate({
        "id": id, "object": "response", "created_at": time.time() if created_at is None else created_at,
        "model": "demo", "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], **fields}).model_dump(mode="json")


def item(id: str, text: str = "") -> dict[str, Any]:
    return {"id": id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": text or id}]}


def save_chain(store: ResponseStore, owner: str, ids: list[str], previous: str | None = None) -> None:
    """Each response continues the one before it, with one input item of its own."""
    for id in ids:
        store.save(owner, response(id), [item(f"in_{id}")], previous)
        previous = id


def expected_history(ids: list[str]) -> list[dict[str, Any]]:
    return [entry for id in ids for entry in (item(f"in_{id}"), response(id)["output"][0])]


def row_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.scalars(select(ApiResponseRow.id)))


# ----- the round trip ----------------------------------------------------------------------------------------------

def test_a_saved_response_comes_back_exactly(store):
    created = int(time.time()) - 3600 + 0.5  # an hour ago, to the half second
    first = response("resp_first", text=UNICODE, created_at=created, instructions="Be brief. " * 2000,
                     temperature=0.1, metadata={"ключ": UNICODE, "n": "12345678901234567890"})
    inputs = [item("msg_in_1", UNICODE), {"id": "fc_1", "type": "function_call_output", "call_id": "call_1",
                                          "output": json.dumps({"big": 2**53 + 1, "x": [1.5, None, True]})}]
    assert len(first["instructions"]) == 20_000
    store.save(ALICE, first, inputs, None)
    second = response("resp_second", previous_response_id="resp_first")
    store.save(ALICE, second, [item("msg_in_2")], "resp_first")

    stored = store.get(ALICE, "resp_first")
    assert stored == StoredResponse("resp_first", ALICE, datetime.fromtimestamp(created, UTC), None, inputs, first)
    assert stored.created_at.tzinfo is UTC
    # Not just equal: the same JSON text, keys in the same order (the API returns it as it was).
    assert json.dumps(stored.response) == json.dumps(first)
    assert json.dumps(stored.input_items) == json.dumps(inputs)
    assert store.get(ALICE, "resp_second") == StoredResponse(
        "resp_second", ALICE, datetime.fromtimestamp(second["created_at"], UTC), "resp_first", [item("msg_in_2")],
        second)
    assert store.get(ALICE, "resp_missing") is None


def test_what_cannot_be_stored_is_refused_and_nothing_is_saved(store, engine):
    refused: dict[str, tuple[Any, Any]] = {
        "NaN": ({**response("resp_nan"), "temperature": math.nan}, []),
        "no id": ({k: v for k, v in response("resp_x").items() if k != "id"}, []),
        "an id too long": (response("resp_" + "x" * 100), []),
        "created_at as text": ({**response("resp_text_time"), "created_at": "yesterday"}, []),
        "an item without an id": (response("resp_item"), [{"type": "message", "role": "user", "content": "hi"}]),
        "a value that is no JSON": ({**response("resp_bytes"), "metadata": {"x": b"bytes"}}, []),
        "items that are no list": (response("resp_tuple"), (item("i"),)),
    }
    for name, (body, items) in refused.items():
        with pytest.raises(ValueError, match=r"\bid\b|created_at|JSON|list"):
            store.save(ALICE, body, items, None)
        assert row_ids(engine) == set(), name
    with pytest.raises(ValueError, match="owner"):
        store.save("o" * 201, response("resp_owner"), [], None)

    taken = response("resp_taken")
    store.save(ALICE, taken, [item("i")], None)
    with pytest.raises(StorageError):  # the id is the primary key: it names one response, whoever asks
        store.save(BOB, response("resp_taken", text="bob's"), [], None)
    assert store.get(ALICE, "resp_taken").response == taken
    assert store.get(BOB, "resp_taken") is None


def test_a_database_failure_is_a_storage_error_and_a_failed_purge_does_not_fail_the_save(store, engine, caplog):
    def fail(statement_start: str):
        def listener(_conn, _cursor, statement, *_args) -> None:
            if statement.lstrip().upper().startswith(statement_start):
                raise OperationalError(statement, None, Exception("the disk is full"))
        return listener

    failing_insert = fail("INSERT INTO API_RESPONSES")
    event.listen(engine, "before_cursor_execute", failing_insert)
    try:
        with pytest.raises(StorageError, match="the disk is full"):
            store.save(ALICE, response("resp_lost"), [], None)
    finally:
        event.remove(engine, "before_cursor_execute", failing_insert)
    assert row_ids(engine) == set()

    failing_purge = fail("DELETE FROM API_RESPONSES")
    event.listen(engine, "before_cursor_execute", failing_purge)
    try:
        with caplog.at_level(logging.WARNING, logger="app.storage.responses"):
            store.save(ALICE, response("resp_kept"), [], None)  # the first save of this store purges
        with pytest.raises(StorageError, match="the disk is full"):
            store.delete(ALICE, "resp_kept")
    finally:
        event.remove(engine, "before_cursor_execute", failing_purge)
    assert "expired responses not purged" in caplog.text and "the disk is full" in caplog.text
    assert store.get(ALICE, "resp_kept") is not None


# ----- owners ------------------------------------------------------------------------------------------------------

def test_another_owners_response_behaves_like_a_missing_one(store):
    save_chain(store, ALICE, ["resp_a1", "resp_a2"])
    for owner in (BOB, ""):  # "" is the owner on a server without an API key: an owner like any other
        assert store.get(owner, "resp_a2") is None
        assert store.input_items(owner, "resp_a2") is None
        errors = []
        for id in ("resp_a2", "resp_nobody"):
            with pytest.raises(ResponseNotFound) as caught:
                store.history(owner, id)
            errors.append(str(caught.value).replace(id, "<id>"))
        assert errors[0] == errors[1]  # the same answer: nothing tells bob that alice's id exists
        assert store.delete(owner, "resp_a2") is False

    # bob's response continuing alice's (an endpoint must not allow it; the store does not follow it either)
    store.save(BOB, response("resp_b1"), [item("in_resp_b1")], "resp_a2")
    with pytest.raises(ResponseNotFound) as caught:
        store.history(BOB, "resp_b1")
    assert caught.value.response_id == "resp_a2"

    store.save("", response("resp_keyless"), [item("in_resp_keyless")], None)
    assert store.get(ALICE, "resp_keyless") is None
    assert store.history("", "resp_keyless") == expected_history(["resp_keyless"])
    assert store.history(ALICE, "resp_a2") == expected_history(["resp_a1", "resp_a2"])  # untouched
    assert store.input_items(ALICE, "resp_a2") == ([item("in_resp_a2")], False)


# ----- chains ------------------------------------------------------------------------------------------------------

def test_the_history_of_a_chain_of_three_is_oldest_first_inputs_before_outputs(store, engine):
    store.save(ALICE, response("resp_1"), [item("in_1a"), item("in_1b")], None)
    store.save(ALICE, response("resp_2", output=[]), [item("in_2")], "resp_1")  # no output (failed, say)
    store.save(ALICE, response("resp_3"), [item("in_3")], "resp_2")
    one, three = response("resp_1")["output"], response("resp_3")["output"]
    assert store.history(ALICE, "resp_1") == [item("in_1a"), item("in_1b"), *one]
    assert store.history(ALICE, "resp_2") == [item("in_1a"), item("in_1b"), *one, item("in_2")]

    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_a: statements.append(statement))
    assert store.history(ALICE, "resp_3") == [item("in_1a"), item("in_1b"), *one, item("in_2"), item("in_3"),
                                              *three]
    # Two queries, however long the chain: its links' metadata, then the bodies of a chain within the limits.
    assert len([s for s in statements if "api_responses" in s]) == 2


def test_a_deleted_link_breaks_only_the_chains_through_it(store):
    save_chain(store, ALICE, ["resp_1", "resp_2", "resp_3"])
    save_chain(store, ALICE, ["resp_other"])
    assert store.delete(ALICE, "resp_2") is True
    assert store.delete(ALICE, "resp_2") is False  # nothing left to delete
    assert store.get(ALICE, "resp_2") is None and store.input_items(ALICE, "resp_2") is None
    assert store.get(ALICE, "resp_3").previous_response_id == "resp_2"  # still readable itself
    assert store.input_items(ALICE, "resp_3") == ([item("in_resp_3")], False)
    for asked in ("resp_3", "resp_2"):
        with pytest.raises(ResponseNotFound, match="'resp_2' not found") as caught:
            store.history(ALICE, asked)
        assert caught.value.response_id == "resp_2"
    assert store.history(ALICE, "resp_1") == expected_history(["resp_1"])
    assert store.history(ALICE, "resp_other") == expected_history(["resp_other"])


def test_a_chain_longer_than_max_chain_is_refused(engine):
    store = ResponseStore(engine, ResponseStoreSettings(max_chain=3))
    save_chain(store, ALICE, ["resp_1", "resp_2", "resp_3", "resp_4"])
    assert store.history(ALICE, "resp_3") == expected_history(["resp_1", "resp_2", "resp_3"])
    with pytest.raises(ResponseChainTooLong, match=r"longer than 3 responses \(DEMO_RESPONSES_MAX_CHAIN\)"):
        store.history(ALICE, "resp_4")


def test_the_default_limit_of_a_thousand_links_is_walked_in_one_query_and_not_past(engine):
    store = ResponseStore(engine, ResponseStoreSettings())
    assert store.settings.max_chain == 1000
    now = datetime.now(UTC)
    rows = [{"id": f"resp_{n}", "owner": ALICE, "created_at": now, "input_items": [item(f"in_{n}")],
             "previous_response_id": f"resp_{n - 1}" if n else None,
             "response": {"id": f"resp_{n}", "output": [{"id": f"out_{n}"}]}} for n in range(1001)]
    with engine.begin() as connection:
        connection.execute(insert(ApiResponseRow), rows)
    history = store.history(ALICE, "resp_999")  # 1000 responses: the limit itself
    assert len(history) == 2000 and history[:2] == [item("in_0"), {"id": "out_0"}]
    assert history[-2:] == [item("in_999"), {"id": "out_999"}]
    with pytest.raises(ResponseChainTooLong) as caught:
        store.history(ALICE, "resp_1000")
    assert isinstance(caught.value, StorageError) and caught.value.max_chain == 1000


def test_a_chain_too_large_is_refused_from_its_rows_sizes_before_any_body_is_loaded(engine):
    """The finding: an 8-link chain of 16 MB per link was loaded whole (+873 MB in the server) before the request's
    size was checked. Each row now records its size; the chain is summed from those."""
    store = ResponseStore(engine, ResponseStoreSettings(max_chain_mb=1))
    junk = "x" * 300_000
    for n in range(4):
        store.save(ALICE, response(f"resp_{n}"), [item(f"in_{n}", junk)], f"resp_{n - 1}" if n else None)
    assert len(store.history(ALICE, "resp_2")) == 6  # three links: 0.9 MB, within the limit
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_a: statements.append(statement))
    with pytest.raises(ResponseChainTooLarge, match=r"1\.1 MB, more than 1\.0 MB \(DEMO_RESPONSES_MAX_CHAIN_MB\)"):
        store.history(ALICE, "resp_3")
    [walk] = [s for s in statements if "api_responses" in s]  # the metadata only: no body was read
    assert "input_items" not in walk and "response" not in walk.replace("api_responses", "").replace(
        "previous_response_id", "")
    with engine.connect() as connection:
        sizes = dict(connection.execute(select(ApiResponseRow.id, ApiResponseRow.size)).all())
    assert all(300_000 < size < 310_000 for size in sizes.values()), sizes


def test_the_store_keeps_its_count_and_bytes_by_deleting_the_oldest(engine):
    """The finding: four requests stored +178 MB, and nothing bounded the store. Past max_responses or max_total_mb
    the oldest responses go, whoever's."""
    counted = ResponseStore(engine, ResponseStoreSettings(max_responses=3))
    base = time.time() - 100
    for n in range(5):
        counted.save(ALICE if n % 2 else BOB, response(f"resp_c{n}", created_at=base + n), [item(f"in_c{n}")], None)
    assert row_ids(engine) == {"resp_c2", "resp_c3", "resp_c4"}

    sized = ResponseStore(engine, ResponseStoreSettings(max_total_mb=1))
    for n in range(5):  # 0.3 MB each: three fit in 1 MB
        sized.save(ALICE, response(f"resp_s{n}", created_at=base + 10 + n), [item(f"in_s{n}", "y" * 300_000)], None)
    assert row_ids(engine) == {"resp_s2", "resp_s3", "resp_s4"}
    with pytest.raises(ValueError, match="more than the whole store may hold"):
        sized.save(ALICE, response("resp_huge"), [item("in_huge", "z" * 1_100_000)], None)
    assert "resp_huge" not in row_ids(engine)


# ----- retention ---------------------------------------------------------------------------------------------------

def test_expired_responses_are_invisible_at_once_and_purged(store, engine, monkeypatch):
    old = (datetime.now(UTC) - timedelta(days=30, minutes=1)).timestamp()
    store.save(ALICE, response("resp_fresh"), [item("in_resp_fresh")], None)  # the first save purges: none yet
    store.save(ALICE, response("resp_old", created_at=old), [item("in_resp_old")], None)
    store.save(ALICE, response("resp_after_old"), [item("in_resp_after_old")], "resp_old")
    assert row_ids(engine) == {"resp_fresh", "resp_old", "resp_after_old"}  # not purged again within a minute
    assert store.get(ALICE, "resp_old") is None and store.input_items(ALICE, "resp_old") is None
    with pytest.raises(ResponseNotFound):
        store.history(ALICE, "resp_old")
    with pytest.raises(ResponseNotFound) as caught:
        store.history(ALICE, "resp_after_old")
    assert caught.value.response_id == "resp_old"
    assert store.delete(ALICE, "resp_old") is False

    assert store.purge_expired() == 1
    assert row_ids(engine) == {"resp_fresh", "resp_after_old"}
    assert store.purge_expired() == 0

    store.save(BOB, response("resp_old_2", created_at=old), [], None)
    store.save(ALICE, response("resp_next"), [], None)
    assert "resp_old_2" in row_ids(engine)
    a_minute_later = time.monotonic() + responses_module.PURGE_INTERVAL_S
    monkeypatch.setattr(responses_module, "time", SimpleNamespace(monotonic=lambda: a_minute_later))
    store.save(ALICE, response("resp_last"), [], None)  # purges, whoever's they are
    assert row_ids(engine) == {"resp_fresh", "resp_after_old", "resp_next", "resp_last"}


def test_the_retention_is_the_settings_and_zero_stores_nothing(engine):
    two_days_old = (datetime.now(UTC) - timedelta(days=2)).timestamp()
    month = ResponseStore(engine, ResponseStoreSettings(retention_days=30))
    day = ResponseStore(engine, ResponseStoreSettings(retention_days=1))
    month.save(ALICE, response("resp_2d", created_at=two_days_old), [item("i")], None)
    assert month.get(ALICE, "resp_2d") is not None and day.get(ALICE, "resp_2d") is None

    off = ResponseStore(engine, ResponseStoreSettings(retention_days=0))
    assert month.enabled and not off.enabled
    off.save(ALICE, response("resp_not_stored"), [item("i")], None)
    assert row_ids(engine) == {"resp_2d"}
    assert off.get(ALICE, "resp_2d") is None and off.input_items(ALICE, "resp_2d") is None
    with pytest.raises(ResponseNotFound):
        off.history(ALICE, "resp_2d")
    assert off.purge_expired() == 1  # with storing off, every stored response is expired
    assert row_ids(engine) == set()


def test_the_settings_come_from_the_environment(monkeypatch, engine):
    monkeypatch.delenv("DEMO_RESPONSES_RETENTION_DAYS", raising=False)
    monkeypatch.delenv("DEMO_RESPONSES_MAX_CHAIN", raising=False)
    assert ResponseStoreSettings.from_env() == ResponseStoreSettings(retention_days=30, max_chain=1000,
                                                                     max_chain_mb=32, max_responses=10_000,
                                                                     max_total_mb=1024)
    monkeypatch.setenv("DEMO_RESPONSES_RETENTION_DAYS", " 0.5 ")
    monkeypatch.setenv("DEMO_RESPONSES_MAX_CHAIN", "7")
    assert ResponseStore(engine).settings == ResponseStoreSettings(retention_days=0.5, max_chain=7)
    monkeypatch.setenv("DEMO_RESPONSES_RETENTION_DAYS", "0")
    assert not ResponseStore(engine).enabled
    for name, value in [("DEMO_RESPONSES_RETENTION_DAYS", "-1"), ("DEMO_RESPONSES_RETENTION_DAYS", "nan"),
                        ("DEMO_RESPONSES_RETENTION_DAYS", "inf"), ("DEMO_RESPONSES_MAX_CHAIN", "0"),
                        ("DEMO_RESPONSES_MAX_CHAIN_MB", "0"), ("DEMO_RESPONSES_MAX_STORED", "0"),
                        ("DEMO_RESPONSES_MAX_STORE_MB", "nan")]:
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=name):
            ResponseStoreSettings.from_env()
        monkeypatch.delenv(name)
    # A retention longer than recorded time keeps everything rather than failing.
    forever = ResponseStore(engine, ResponseStoreSettings(retention_days=1e12))
    forever.save(ALICE, response("resp_ancient", created_at=0), [], None)
    assert forever.get(ALICE, "resp_ancient") is not None and forever.purge_expired() == 0


# ----- input items -------------------------------------------------------------------------------------------------

def test_input_items_are_listed_in_pages_as_openai_lists_them(store):
    items = [item(f"in_{n}") for n in range(5)]
    store.save(ALICE, response("resp_items"), items, None)
    store.save(ALICE, response("resp_none"), [], None)
    assert store.input_items(ALICE, "resp_items") == (items[::-1], False)  # newest first by default
    assert store.input_items(ALICE, "resp_items", limit=2, order="asc") == (items[0:2], True)
    assert store.input_items(ALICE, "resp_items", after="in_1", limit=2, order="asc") == (items[2:4], True)
    assert store.input_items(ALICE, "resp_items", after="in_3", limit=2, order="asc") == (items[4:5], False)
    assert store.input_items(ALICE, "resp_items", after="in_2", limit=2, order="asc") == (items[3:5], False)
    assert store.input_items(ALICE, "resp_items", after="in_2", limit=1) == ([items[1]], True)
    assert store.input_items(ALICE, "resp_items", after="in_1", limit=5) == ([items[0]], False)
    assert store.input_items(ALICE, "resp_items", after="in_0") == ([], False)
    assert store.input_items(ALICE, "resp_items", after="no_such_item") == ([], False)
    assert store.input_items(ALICE, "resp_none") == ([], False)
    assert store.input_items(ALICE, "resp_missing") is None
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "sideways"}):
        with pytest.raises(ValueError):
            store.input_items(ALICE, "resp_items", **bad)


# ----- concurrency -------------------------------------------------------------------------------------------------

def test_two_threads_saving_chains_at_once_lose_nothing(engine):
    per_thread = 15
    # A store each: both purge on their first save, at the same moment.
    stores = [ResponseStore(engine, ResponseStoreSettings()) for _ in range(2)]

    def work(worker: int) -> None:
        save_chain(stores[worker], f"owner{worker}", [f"resp_{worker}_{n}" for n in range(per_thread)])

    assert at_once(2, work) == []
    for worker in range(2):
        ids = [f"resp_{worker}_{n}" for n in range(per_thread)]
        assert stores[1 - worker].history(f"owner{worker}", ids[-1]) == expected_history(ids)
    assert len(row_ids(engine)) == 2 * per_thread


# ----- the migration -----------------------------------------------------------------------------------------------

def test_upgrading_from_0002_adds_api_responses_and_downgrading_removes_only_them(database_url):
    engine = engine_at(database_url, "0002")
    try:
        assert "api_responses" not in inspect(engine).get_table_names()
        conversations = ConversationStore(engine)
        kept = old_conversation(engine, "alice", "Before the upgrade", ["Hello"])
        conversations.set_preferences("alice", {"temperature": 0.3})

        upgrade_to_head(engine)  # what open_database does when the app starts on the old database
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()  # whatever came after, too
        assert schema_differences(engine) == []  # the migrations make what the models declare
        indexes = {index["name"]: index["column_names"] for index in inspect(engine).get_indexes("api_responses")}
        assert indexes == {"ix_api_responses_owner_created_at": ["owner", "created_at"],
                           "ix_api_responses_created_at": ["created_at"]}
        store = ResponseStore(engine, ResponseStoreSettings())
        save_chain(store, ALICE, ["resp_1", "resp_2"])
        assert store.history(ALICE, "resp_2") == expected_history(["resp_1", "resp_2"])

        migrate(engine, "downgrade", "0002")
        with engine.connect() as connection:
            assert current_revision(connection) == "0002"
        assert "api_responses" not in inspect(engine).get_table_names()
        assert old_texts(engine, kept) == ["Hello"]
        assert conversations.get_preferences("alice") == {"temperature": 0.3}

        upgrade_to_head(engine)  # and up again: an empty table
        assert store.get(ALICE, "resp_1") is None
        with engine.connect() as connection:
            assert connection.scalar(select(func.count()).select_from(ApiResponseRow)) == 0
    finally:
        engine.dispose()


def test_upgrading_from_0005_records_the_size_of_every_stored_response(database_url):
    engine = engine_at(database_url, "0005")
    try:
        body = response("resp_old", text="Grüße " * 1000)
        with engine.begin() as connection:
            connection.execute(insert(ApiResponseRow.__table__).values(
                id="resp_old", owner=ALICE, created_at=datetime.now(UTC), previous_response_id=None,
                input_items=[item("in_old")], response=body))
        upgrade_to_head(engine)
        with engine.connect() as connection:
            size = connection.scalar(select(ApiResponseRow.size).where(ApiResponseRow.id == "resp_old"))
        expected = len(json.dumps(body, ensure_ascii=False).encode()) + len(
            json.dumps([item("in_old")], ensure_ascii=False).encode())
        assert abs(size - expected) < 200  # as the database renders the JSON (PostgreSQL keeps it as given)
        columns = [column["name"] for column in inspect(engine).get_columns("api_responses")]
        if engine.dialect.name == "sqlite":  # before the large JSON, which the chain walk need not read
            assert columns.index("size") < columns.index("input_items")
        store = ResponseStore(engine, ResponseStoreSettings())
        assert store.history(ALICE, "resp_old") == [item("in_old"), *body["output"]]
        migrate(engine, "downgrade", "0005")
        assert "size" not in [column["name"] for column in inspect(engine).get_columns("api_responses")]
    finally:
        engine.dispose()
