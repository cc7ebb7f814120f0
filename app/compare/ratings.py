"""The leaderboard from votes: Bradley–Terry ratings with bootstrap confidence intervals, Elo beside them, wins,
losses and ties, and each target's median speed.

Bradley–Terry: target i beats j with probability p_i / (p_i + p_j). The strengths are the maximum-likelihood
estimate over all votes, a tie (and "both bad", which says neither won) counting half a win for each side, found
with Hunter's MM iteration (2004). A weak prior keeps them finite when a target won or lost every game (one vote
alone would otherwise make it infinitely better): every target also played `PRIOR_GAMES` games against a fixed
reference of strength 1, winning half of them. Ratings are on Elo's scale, 1000 + 400·log10(p): 400 points more
means ten times the odds of winning, and a target with no votes stays at 1000.

The uncertainty is a percentile bootstrap: the votes resampled with replacement `rounds` times (a seeded RNG, so a
leaderboard is the same each time it is drawn), refitted each time; its interval holds the middle 95% of a
target's ratings. A bootstrap sees no spread in very few votes (one vote resampled is always that vote), so the
interval shown is the wider of it and the normal-approximation one from the likelihood's curvature (rating ±
1.96 standard errors, the Fisher information of the same fit inverted): after one vote it spans hundreds of points,
as it should. Elo, by contrast, depends on the order of the votes (oldest first), which is why Bradley–Terry
ranks.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.storage.compare_votes import VoteOutcome

BASE = 1000.0
SCALE = 400.0  # points per tenfold odds, as Elo's
PRIOR_GAMES = 1.0
ELO_K = 32.0
BOOTSTRAP_ROUNDS = 200
CONFIDENCE = 0.95
_SCORE = {"a": 1.0, "b": 0.0, "tie": 0.5, "both_bad": 0.5}  # A's share of the win
_Z = {0.9: 1.6449, 0.95: 1.9600, 0.99: 2.5758}  # two-sided normal quantiles

Game = tuple[str, str, float]  # (A's label, B's label, A's score: 1 won, 0.5 tie, 0 lost)


@dataclass(frozen=True)
class Standing:
    """One target on the leaderboard."""

    label: str
    rating: float  # Bradley–Terry, on Elo's scale
    ci_low: float  # the 95% interval of `rating` (the wider of the bootstrap's and the normal approximation's)
    ci_high: float
    standard_error: float  # of `rating`, from the likelihood's curvature
    elo: float
    games: int
    wins: int
    losses: int
    ties: int  # "tie" verdicts
    both_bad: int  # "both bad" verdicts (a tie for the ratings)
    median_ttft_s: float | None
    median_tokens_per_second: float | None

    @property
    def win_rate(self) -> float | None:
        """Wins per game, a tie or both-bad counting half."""
        return (self.wins + 0.5 * (self.ties + self.both_bad)) / self.games if self.games else None

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "rating": self.rating, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "standard_error": self.standard_error, "elo": self.elo, "games": self.games, "wins": self.wins,
                "losses": self.losses, "ties": self.ties, "both_bad": self.both_bad, "win_rate": self.win_rate,
                "median_ttft_s": self.median_ttft_s, "median_tokens_per_second": self.median_tokens_per_second}


def games_of(outcomes: Iterable[VoteOutcome]) -> list[Game]:
    return [(outcome.label_a, outcome.label_b, _SCORE[outcome.verdict]) for outcome in outcomes]


def bradley_terry(games: Sequence[Game], labels: Iterable[str] = (), prior: float = PRIOR_GAMES,
                  tolerance: float = 1e-10, max_iterations: int = 10_000) -> dict[str, float]:
    """Each target's Bradley–Terry rating (Elo's scale) from `games`; `labels` adds targets without games (they
    get BASE). `prior` > 0: the half-won games against the reference that keep every rating finite."""
    return {name: BASE + SCALE * math.log10(p) for name, p in _strengths(games, labels, prior, tolerance,
                                                                          max_iterations).items()}


def _strengths(games: Sequence[Game], labels: Iterable[str] = (), prior: float = PRIOR_GAMES,
               tolerance: float = 1e-10, max_iterations: int = 10_000) -> dict[str, float]:
    """The Bradley–Terry strengths p (the reference's is 1), by Hunter's MM iteration."""
    if prior <= 0:
        raise ValueError("prior must be positive: without it a target that won every game has no finite rating")
    names = sorted({*labels, *(a for a, _, _ in games), *(b for _, b, _ in games)})
    wins = dict.fromkeys(names, prior / 2)  # half of the games against the reference are won
    meetings: Counter[tuple[str, str]] = Counter()  # games between each pair, both ways
    for a, b, score in games:
        if a == b:
            raise ValueError(f"a game between {a!r} and itself")
        wins[a] += score
        wins[b] += 1.0 - score
        meetings[a, b] += 1
        meetings[b, a] += 1
    opponents: dict[str, list[tuple[str, int]]] = {name: [] for name in names}
    for (a, b), count in meetings.items():
        opponents[a].append((b, count))
    strength = dict.fromkeys(names, 1.0)
    for _ in range(max_iterations):
        updated = {}
        for name in names:
            p = strength[name]
            denominator = prior / (p + 1.0) + sum(count / (p + strength[other]) for other, count in opponents[name])
            updated[name] = wins[name] / denominator
        change = max((abs(math.log(updated[n] / strength[n])) for n in names), default=0.0)
        strength = updated
        if change < tolerance:
            break
    return strength


def standard_errors(games: Sequence[Game], labels: Iterable[str] = (), prior: float = PRIOR_GAMES
                    ) -> dict[str, float]:
    """Each rating's standard error (Elo's scale) relative to the field (its distance from the mean of all the
    ratings): the observed Fisher information of the fit (each game between i and j adds π(1-π) to i's and j's
    diagonal and takes it off their pair, π being i's chance of winning; each target's prior games against the
    reference add to its diagonal), inverted, then centred."""
    strength = _strengths(games, labels, prior)
    names = sorted(strength)
    if not names:
        return {}
    position = {name: index for index, name in enumerate(names)}
    information = [[0.0] * len(names) for _ in names]
    for name in names:
        chance = strength[name] / (strength[name] + 1.0)
        information[position[name]][position[name]] += prior * chance * (1.0 - chance)
    for a, b, _ in games:
        chance = strength[a] / (strength[a] + strength[b])
        weight = chance * (1.0 - chance)
        i, j = position[a], position[b]
        information[i][i] += weight
        information[j][j] += weight
        information[i][j] -= weight
        information[j][i] -= weight
    covariance = _inverse(information)
    # Relative to the field: the covariance of each strength less their mean (the reference only anchors the scale;
    # how far every target is from it is not what a leaderboard compares).
    size = len(names)
    row_means = [sum(row) / size for row in covariance]
    grand_mean = sum(row_means) / size
    centred = [covariance[i][i] - 2 * row_means[i] + grand_mean for i in range(size)]
    per_unit = SCALE / math.log(10)  # natural-log strength to rating points
    return {name: per_unit * math.sqrt(max(centred[i], 0.0)) for name, i in position.items()}


def _inverse(matrix: list[list[float]]) -> list[list[float]]:
    """The inverse of a symmetric positive definite matrix (Gauss–Jordan with partial pivoting)."""
    size = len(matrix)
    work = [[*row, *(1.0 if i == j else 0.0 for j in range(size))] for i, row in enumerate(matrix)]
    for column in range(size):
        pivot = max(range(column, size), key=lambda row: abs(work[row][column]))
        work[column], work[pivot] = work[pivot], work[column]
        scale = work[column][column]
        work[column] = [value / scale for value in work[column]]
        for row in range(size):
            if row != column and work[row][column]:
                factor = work[row][column]
                work[row] = [value - factor * lead for value, lead in zip(work[row], work[column], strict=True)]
    return [row[size:] for row in work]


def bootstrap_intervals(games: Sequence[Game], labels: Iterable[str] = (), rounds: int = BOOTSTRAP_ROUNDS,
                        seed: int = 0, confidence: float = CONFIDENCE) -> dict[str, tuple[float, float]]:
    """Each target's percentile bootstrap interval of its Bradley–Terry rating: `games` resampled with replacement
    `rounds` times with random.Random(seed). A single game (or none) has nothing to resample: its interval is the
    rating itself (the leaderboard widens it with the standard error)."""
    names = sorted({*labels, *(a for a, _, _ in games), *(b for _, b, _ in games)})
    if not games or rounds < 1:
        ratings = bradley_terry(games, names)
        return {name: (ratings[name], ratings[name]) for name in names}
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        resampled = rng.choices(games, k=len(games))
        for name, rating in bradley_terry(resampled, names).items():
            samples[name].append(rating)
    tail = (1.0 - confidence) / 2
    return {name: (_percentile(values, tail), _percentile(values, 1.0 - tail)) for name, values in samples.items()}


def elo(games: Sequence[Game], labels: Iterable[str] = (), k: float = ELO_K) -> dict[str, float]:
    """Elo ratings after playing `games` in order from BASE each (a tie half a win)."""
    ratings = dict.fromkeys(sorted({*labels, *(a for a, _, _ in games), *(b for _, b, _ in games)}), BASE)
    for a, b, score in games:
        expected = 1.0 / (1.0 + 10 ** ((ratings[b] - ratings[a]) / SCALE))
        ratings[a] += k * (score - expected)
        ratings[b] -= k * (score - expected)
    return ratings


def leaderboard(outcomes: Sequence[VoteOutcome], labels: Iterable[str] = (), rounds: int = BOOTSTRAP_ROUNDS,
                seed: int = 0) -> list[Standing]:
    """Every target that has votes (and those in `labels`), best first: by Bradley–Terry rating, then label."""
    games = games_of(outcomes)
    names = sorted({*labels, *(a for a, _, _ in games), *(b for _, b, _ in games)})
    if not names:
        return []
    ratings = bradley_terry(games, names)
    intervals = bootstrap_intervals(games, names, rounds, seed)
    errors = standard_errors(games, names)
    z = _Z[CONFIDENCE]
    elos = elo(games, names)
    tally = {name: Counter[str]() for name in names}
    ttft: dict[str, list[float]] = {name: [] for name in names}
    speed: dict[str, list[float]] = {name: [] for name in names}
    for outcome in outcomes:
        for side, label, figures in (("a", outcome.label_a, outcome.metrics_a), ("b", outcome.label_b,
                                                                                   outcome.metrics_b)):
            verdict = outcome.verdict
            tally[label][verdict if verdict in ("tie", "both_bad") else "wins" if verdict == side else "losses"] += 1
            _add_number(ttft[label], figures.get("ttft_s"))
            _add_number(speed[label], figures.get("tokens_per_second"))
    standings = [
        Standing(label=name, rating=ratings[name],
                 ci_low=min(intervals[name][0], ratings[name] - z * errors[name]),
                 ci_high=max(intervals[name][1], ratings[name] + z * errors[name]),
                 standard_error=errors[name], elo=elos[name], games=sum(tally[name].values()), wins=tally[name]["wins"],
                 losses=tally[name]["losses"], ties=tally[name]["tie"], both_bad=tally[name]["both_bad"],
                 median_ttft_s=statistics.median(ttft[name]) if ttft[name] else None,
                 median_tokens_per_second=statistics.median(speed[name]) if speed[name] else None)
        for name in names
    ]
    return sorted(standings, key=lambda standing: (-standing.rating, standing.label))


def _add_number(values: list[float], value: Any) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        values.append(float(value))


def _percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
