"""Presets (app/presets/preset.py, app/storage/presets.py): what a preset holds and leaves alone, the file users
export and import (every mistake named with its preset and field, nothing half-imported), and the store on SQLite
and PostgreSQL (names per user, built-in names reserved, edits, renames, the per-user limit)."""

from __future__ import annotations

import json
import re

import pytest

from app.presets.built_in import BUILT_IN
from app.presets.preset import MAX_PRESETS, PresetError, parse_preset, presets_file, read_presets_file
from app.storage.presets import PresetStore


def test_a_preset_stores_only_what_it_sets_and_null_means_the_default():
    brief = parse_preset({"name": " Brief answers ", "system_prompt": "Be brief.", "max_new_tokens": 80})
    assert brief.name == "Brief answers" and brief.stored() == {"name": "Brief answers", "system_prompt": "Be brief.",
                                                                "max_new_tokens": 80}
    assert not brief.sets("temperature") and brief.summary() == "system prompt, max new tokens 80"
    fresh = parse_preset({"name": "Fresh draws", "seed": None, "thinking": None})
    assert fresh.sets("seed") and fresh.seed is None and fresh.summary() == "random seed, thinking: model default"


@pytest.mark.parametrize(("data", "said"), [
    ({"name": "Hot", "temperature": 7}, "temperature: Input should be less than or equal to 2"),
    ({"name": "Hot", "temperature": "0.5"}, "temperature: Input should be a valid number"),
    ({"name": ""}, "name: String should have at least 1 character"),
    ({"name": "X", "colour": "red"}, "colour: unknown key"),
    ({"name": "X", "model": {"backend": "gpt"}}, "model.backend: unknown backend 'gpt'"),
    ({"name": "X", "model": {"backend": "openai", "api_base_url": "file:///etc/passwd"}},
     "model.api_base_url: must be an http(s) URL"),
    ({"name": "X", "model": {"backend": "openai", "api_key": "sk-secret"}}, "model.api_key: unknown key"),
    ({"name": "X", "tools": ["calc; rm -rf /"]}, "tools.0: String should match pattern"),
])
def test_a_preset_that_cannot_be_used_is_refused_with_the_field(data, said):
    with pytest.raises(PresetError, match="^" + re.escape("preset 2: ") + ".*" +
                       re.escape(said)):
        parse_preset(data, "preset 2")


def test_presets_go_out_as_a_file_and_come_back_the_same():
    presets = [parse_preset({"name": "A", "temperature": 0.3, "seed": None}),
               parse_preset({"name": "B", "system_prompt": "Ünïcode ✓", "tools": ["calculator"],
                             "model": {"backend": "vllm", "model_path": "/models/qwen"}})]
    data = presets_file(presets)
    assert json.loads(data)["format"] == "composite-demo-presets"
    again = read_presets_file(data)
    assert [preset.stored() for preset in again] == [preset.stored() for preset in presets]


@pytest.mark.parametrize(("data", "said"), [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", 'a "presets" list'),
    (b'{"presets": "all"}', 'a "presets" list'),
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    (json.dumps({"presets": [{"name": "Ok"}, {"name": "Hot", "temperature": 9}]}).encode(),
     "preset 2 ('Hot'): temperature: Input should be less than or equal to 2"),
    (json.dumps({"presets": [{"name": "Same"}, {"name": "Same"}]}).encode(), "two presets named 'Same'"),
    (json.dumps({"presets": [{"name": f"P{n}"} for n in range(MAX_PRESETS + 1)]}).encode(), "at most 200"),
    (b" " * 1_000_001, "at most 1,000,000"),
    (b'{"presets": [{"name": "Big", "seed": ' + b"9" * 5000 + b"}]}", "not JSON"),
    (json.dumps({"presets": [{"name": "Same"}, {"name": "SAME"}]}).encode(), "two presets named 'Same'"),
    (json.dumps({"presets": [{"name": "X", "model": {"backend": "b" * 900_000}}]}).encode(), "unknown backend"),
])
def test_a_file_that_cannot_be_imported_says_why(data, said):
    with pytest.raises(PresetError, match=re.escape(said)) as refused:
        read_presets_file(data)
    assert len(str(refused.value)) < 1000  # said in a line, not the file echoed back


def test_a_file_saved_with_a_byte_order_mark_is_read():
    assert read_presets_file(b"\xef\xbb\xbf" + presets_file([parse_preset({"name": "A"})]))[0].name == "A"


@pytest.fixture
def store(engine) -> PresetStore:
    return PresetStore(engine)


def test_the_store_keeps_each_users_presets_by_name(store):
    store.save("alice", parse_preset({"name": "Reviewer", "system_prompt": "Review code.", "temperature": 0.2}))
    store.save("bob", parse_preset({"name": "Reviewer", "temperature": 1.0}))
    [mine] = store.list("alice")
    assert mine.stored() == {"name": "Reviewer", "system_prompt": "Review code.", "temperature": 0.2}
    assert store.list("bob")[0].temperature == 1.0 and store.list("carol") == []

    with pytest.raises(PresetError, match="already: pick another name, or choose it and update it"):
        store.save("alice", parse_preset({"name": "Reviewer", "temperature": 0.4}))  # a new one: not over it
    store.save("alice", parse_preset({"name": "Reviewer", "temperature": 0.4}), replaces="Reviewer")  # updated
    assert [p.stored() for p in store.list("alice")] == [{"name": "Reviewer", "temperature": 0.4}]
    store.save("alice", parse_preset({"name": "Strict reviewer", "temperature": 0.0}), replaces="Reviewer")
    assert [p.name for p in store.list("alice")] == ["Strict reviewer"]  # renamed, not copied
    store.save("alice", parse_preset({"name": "Other"}))
    with pytest.raises(PresetError, match="You have a preset named 'Other' already"):
        store.save("alice", parse_preset({"name": "Other"}), replaces="Strict reviewer")
    for built_in in BUILT_IN:
        with pytest.raises(PresetError, match="built-in preset's name"):
            store.save("alice", parse_preset({"name": built_in.name.upper()}))
    for lookalike in ("Ｐrecise", "Precise · built-in", "Mine · BUILT-IN"):  # fullwidth P; the sidebar's own mark
        with pytest.raises(PresetError, match="looks like one"):
            store.save("alice", parse_preset({"name": lookalike}))
    assert store.delete("alice", "Other") and not store.delete("alice", "Other") and not store.delete("bob", "x")
    assert [p.name for p in store.list("bob")] == ["Reviewer"]  # untouched by alice's


def test_an_import_is_all_or_nothing_and_replaces_same_names(store):
    store.save("alice", parse_preset({"name": "Kept", "temperature": 0.1}))
    store.save("alice", parse_preset({"name": "Replaced", "temperature": 0.1}))
    added, replaced = store.import_all("alice", [parse_preset({"name": "Replaced", "temperature": 0.9}),
                                                 parse_preset({"name": "New"})])
    assert (added, replaced) == (1, 1)
    assert {p.name: p.temperature for p in store.list("alice")} == {"Kept": 0.1, "New": None, "Replaced": 0.9}
    with pytest.raises(PresetError, match="built-in"):
        store.import_all("alice", [parse_preset({"name": "Another"}), parse_preset({"name": "Precise"})])
    assert "Another" not in {p.name for p in store.list("alice")}
    too_many = [parse_preset({"name": f"P{n}"}) for n in range(MAX_PRESETS - 2)]
    with pytest.raises(PresetError, match="more than 200 presets"):
        store.import_all("alice", too_many)
    assert len(store.list("alice")) == 3


def test_a_stored_preset_that_no_longer_passes_is_skipped_not_applied(store, engine):
    from sqlalchemy import update

    from app.storage.tables import PresetRow

    store.save("alice", parse_preset({"name": "Fine", "temperature": 0.5}))
    store.save("alice", parse_preset({"name": "Broken", "temperature": 0.5}))
    with engine.begin() as connection:
        connection.execute(update(PresetRow).where(PresetRow.name == "Broken").values(settings={"temperature": 99}))
    with engine.begin() as connection:
        connection.execute(update(PresetRow).where(PresetRow.name == "Fine").values(settings=[1, 2]))
    assert store.list("alice") == []  # not an object: skipped, the sidebar still draws
