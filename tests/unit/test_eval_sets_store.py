"""Eval sets in the database (app/storage/eval_sets.py, migration 0013), on SQLite and PostgreSQL: saved, replaced
only from the version read, names unique per owner, runs kept newest first (and only the newest 50), everything
gone with its set, and every owner apart."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.storage import VersionConflict
from app.storage.eval_sets import MAX_RUNS_KEPT, EvalSetStore, EvalSetTaken
from app.storage.migrate import current_revision, head_revision
from app.storage.tables import EvalRunRow
from tests.database import schema_differences

DOCUMENT = {"name": "Arithmetic", "cases": [{"name": "multiplies", "messages": [{"role": "user", "content": "17*23?"}],
                                             "checks": [{"type": "contains", "text": "391"}]}]}


def test_sets_are_saved_replaced_from_their_version_and_kept_apart(engine):
    store = EvalSetStore(engine)
    assert store.save("alice", "Arithmetic", DOCUMENT) == 1
    with pytest.raises(EvalSetTaken):
        store.save("alice", "Arithmetic", DOCUMENT)
    assert store.save("bob", "Arithmetic", DOCUMENT) == 1  # another owner's name space
    grown = {**DOCUMENT, "cases": [*DOCUMENT["cases"], {**DOCUMENT["cases"][0], "name": "again"}]}
    assert store.save("alice", "Arithmetic", grown, expected_version=1) == 2
    with pytest.raises(VersionConflict):  # a second tab that read version 1 does not overwrite it
        store.save("alice", "Arithmetic", DOCUMENT, expected_version=1)
    stored = store.get("alice", "Arithmetic")
    assert stored is not None and stored.version == 2 and stored.document == grown
    assert [s.name for s in store.list("alice")] == ["Arithmetic"] and store.get("carol", "Arithmetic") is None


def test_runs_are_kept_newest_first_and_go_with_their_set(engine):
    store = EvalSetStore(engine)
    store.save("alice", "Arithmetic", DOCUMENT)
    for number in range(MAX_RUNS_KEPT + 3):
        store.add_run("alice", "Arithmetic", {"run": number})
    assert [run["run"] for run in store.runs("alice", "Arithmetic", limit=3)] == [52, 51, 50]
    assert len(store.runs("alice", "Arithmetic", limit=100)) == MAX_RUNS_KEPT
    assert store.runs("bob", "Arithmetic") == []
    with pytest.raises(LookupError):
        store.add_run("bob", "Arithmetic", {"run": 0})
    assert store.delete("alice", "Arithmetic") and not store.delete("alice", "Arithmetic")
    assert store.runs("alice", "Arithmetic") == []
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(EvalRunRow)) == 0  # its runs went with it
        assert current_revision(connection) == head_revision()
    assert schema_differences(engine) == []
