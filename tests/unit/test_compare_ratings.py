"""The leaderboard (app/compare/ratings.py) on votes whose answer is known, and its export (app/compare/export.py)."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime, timedelta

import pytest

from app.compare.export import leaderboard_csv, leaderboard_json, votes_csv, votes_json
from app.compare.ratings import BASE, bootstrap_intervals, bradley_terry, elo, games_of, leaderboard
from app.storage.compare_votes import CompareVote, VoteOutcome

T0 = datetime(2026, 11, 26, tzinfo=UTC)


def vote(a: str, b: str, verdict: str, n: int = 0, ttft: tuple[float, float] = (0.1, 0.2),
         speed: tuple[float, float] = (50.0, 20.0)) -> VoteOutcome:
    return VoteOutcome(a, b, verdict,  # type: ignore[arg-type]
                       {"ttft_s": ttft[0], "tokens_per_second": speed[0]},
                       {"ttft_s": ttft[1], "tokens_per_second": speed[1]}, T0 + timedelta(minutes=n))


def test_a_dominant_target_ranks_first_and_the_order_follows_the_wins():
    votes = ([vote("strong", "middle", "a")] * 8 + [vote("middle", "strong", "a")] * 2
             + [vote("middle", "weak", "a")] * 8 + [vote("weak", "middle", "a")] * 2
             + [vote("weak", "strong", "b")] * 9 + [vote("strong", "weak", "tie")])
    board = leaderboard(votes, seed=1)
    assert [s.label for s in board] == ["strong", "middle", "weak"]
    strong, middle, weak = board
    assert (strong.wins, strong.losses, strong.ties, strong.games) == (17, 2, 1, 20)
    assert (weak.wins, weak.losses, weak.ties) == (2, 17, 1)
    assert strong.rating > middle.rating > weak.rating
    assert strong.elo > weak.elo
    for standing in board:  # each interval holds its rating
        assert standing.ci_low <= standing.rating <= standing.ci_high
    assert strong.ci_low > weak.ci_high  # this much evidence separates them
    assert strong.win_rate == pytest.approx(17.5 / 20)


def test_the_ratings_are_the_maximum_likelihood_estimate():
    """Two targets only: the MLE with the prior has a closed form to check against. A wins w of n games; with one
    half-won game each against the reference (strength 1), the strengths p, q solve the likelihood equations, which
    the MM iteration must reach."""
    ratings = bradley_terry([("a", "b", 1.0)] * 7 + [("a", "b", 0.0)] * 3)
    p, q = (10 ** ((ratings[name] - BASE) / 400) for name in ("a", "b"))
    # Score equations: wins = expected wins, for each target (7 + 0.5 for a, 3 + 0.5 for b).
    assert 7.5 == pytest.approx(10 * p / (p + q) + p / (p + 1), rel=1e-6)
    assert 3.5 == pytest.approx(10 * q / (p + q) + q / (q + 1), rel=1e-6)
    # Without the prior's pull the odds would be 7:3; the prior pulls them a little towards even.
    assert 1 < p / q < 7 / 3


def test_ties_count_half_and_both_bad_is_a_tie_for_the_ratings():
    even = leaderboard([vote("x", "y", "tie"), vote("y", "x", "both_bad"), vote("x", "y", "tie")])
    x, y = sorted(even, key=lambda s: s.label)
    assert x.rating == pytest.approx(BASE) and y.rating == pytest.approx(BASE)
    assert x.elo == pytest.approx(y.elo)
    assert (x.ties, x.both_bad, x.wins, x.losses, x.games) == (2, 1, 0, 0, 3)
    assert x.win_rate == 0.5
    # A win and a loss between the same two is even too.
    ratings = bradley_terry(games_of([vote("x", "y", "a"), vote("x", "y", "b")]))
    assert ratings["x"] == pytest.approx(ratings["y"])


def test_a_single_vote_ranks_the_winner_first_with_finite_ratings_and_wide_intervals():
    [winner, loser] = leaderboard([vote("new", "old", "b")])
    assert (winner.label, loser.label) == ("old", "new")
    assert all(math.isfinite(value) for value in (winner.rating, loser.rating, winner.ci_low, winner.ci_high))
    assert winner.rating > BASE > loser.rating
    assert winner.rating - loser.rating < 400  # one game is weak evidence: less than tenfold odds
    # Resampling one vote always gives that same vote: the bootstrap alone sees no spread ...
    games = games_of([vote("new", "old", "b")])
    assert bootstrap_intervals(games)["old"] == pytest.approx((winner.rating, winner.rating))
    # ... so the interval shown is the likelihood's: one vote leaves the order open (the intervals overlap).
    assert winner.ci_high - winner.ci_low > 600 and winner.ci_low < loser.ci_high
    assert winner.ci_low < winner.rating < winner.ci_high
    assert winner.standard_error == pytest.approx((winner.ci_high - winner.rating) / 1.96)
    # More of the same votes narrow it.
    [many, _] = leaderboard([vote("new", "old", "b")] * 30)
    assert many.ci_high - many.ci_low < winner.ci_high - winner.ci_low


def test_no_votes_no_leaderboard_but_named_targets_start_even():
    assert leaderboard([]) == []
    [a, b] = leaderboard([], labels=["a", "b"])
    assert (a.rating, a.elo, a.games, a.win_rate, a.median_ttft_s) == (BASE, BASE, 0, None, None)
    assert b.ci_low < BASE < b.ci_high and b.ci_high - BASE == pytest.approx(BASE - b.ci_low)  # all still open
    assert bradley_terry([]) == {} and elo([]) == {}


def test_the_bootstrap_is_reproducible_with_its_seed():
    games = games_of([vote("a", "b", "a")] * 3 + [vote("a", "b", "b")] * 2 + [vote("b", "c", "a")] * 4)
    assert bootstrap_intervals(games, rounds=50, seed=3) == bootstrap_intervals(games, rounds=50, seed=3)
    assert bootstrap_intervals(games, rounds=50, seed=3) != bootstrap_intervals(games, rounds=50, seed=4)


def test_elo_follows_the_votes_in_order():
    ratings = elo([("a", "b", 1.0)])
    assert ratings == {"a": BASE + 16, "b": BASE - 16}  # K 32, even odds at the start
    upset = elo([("a", "b", 1.0)] * 5 + [("a", "b", 0.0)])
    assert upset["a"] > upset["b"] and upset["a"] + upset["b"] == pytest.approx(2 * BASE)


def test_the_leaderboard_shows_each_targets_median_speed():
    votes = [vote("fast", "slow", "tie", ttft=(0.1, 1.0), speed=(100.0, 10.0)),
             vote("slow", "fast", "tie", ttft=(3.0, 0.3), speed=(30.0, 80.0)),
             vote("fast", "slow", "a", ttft=(0.2, 2.0), speed=(90.0, 20.0))]
    by_label = {s.label: s for s in leaderboard(votes)}
    assert (by_label["fast"].median_ttft_s, by_label["fast"].median_tokens_per_second) == (0.2, 90.0)
    assert (by_label["slow"].median_ttft_s, by_label["slow"].median_tokens_per_second) == (2.0, 20.0)
    missing = VoteOutcome("fast", "slow", "a", {}, {"ttft_s": None, "tokens_per_second": math.nan}, T0)
    assert {s.label: s.median_ttft_s for s in leaderboard([missing])} == {"fast": None, "slow": None}


def test_votes_and_the_leaderboard_export_as_json_and_csv():
    stored = [CompareVote("v1", "alice", T0, "a", [{"label": "A", "settings": {"backend": "hf"}},
                                                   {"label": "B, quoted \"too\"", "settings": {}}],
                          "Line one\nline two", ["Answer A", "Answer B"],
                          [{"ttft_s": 0.25, "tokens_per_second": 40.0}, {}])]
    [exported] = json.loads(votes_json(stored))
    assert exported == {"id": "v1", "created_at": "2026-11-26T00:00:00+00:00", "verdict": "a",
                        "targets": stored[0].targets, "prompt": "Line one\nline two",
                        "answers": ["Answer A", "Answer B"], "metrics": stored[0].metrics}
    [row] = list(csv.DictReader(io.StringIO(votes_csv(stored))))
    assert (row["winner"], row["label_b"], row["prompt"], row["ttft_s_a"], row["ttft_s_b"]) == (
        "A", 'B, quoted "too"', "Line one\nline two", "0.2500", "")
    assert json.loads(row["settings_a"]) == {"backend": "hf"}

    board = leaderboard([vote("A", "B", "a"), vote("A", "B", "a")])
    exported_board = json.loads(leaderboard_json(board))
    assert [(entry["rank"], entry["label"], entry["wins"]) for entry in exported_board] == [(1, "A", 2), (2, "B", 0)]
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(board))))
    assert [(r["rank"], r["label"], r["games"]) for r in rows] == [("1", "A", "2"), ("2", "B", "2")]
    assert float(rows[0]["rating"]) == pytest.approx(board[0].rating, abs=1e-4)
