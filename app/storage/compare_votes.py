"""CompareVoteStore: the Compare page's votes (table compare_votes). A vote is between two targets' answers to one
prompt: the targets (label and model settings, never a secret), the prompt, both answers and their figures, and the
verdict: "a" (A's answer is better), "b", "tie" or "both_bad".

Each method that reads or changes votes takes the owner first and only touches that owner's rows; another owner's
vote behaves exactly like a missing one. `outcomes` without an owner reads every owner's votes for a shared
leaderboard, and then only their labels, verdicts, figures and times: never a prompt, an answer or settings."""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy import delete, select

from app.storage.database import rowcount
from app.storage.sessions import EngineStore
from app.storage.tables import CompareVoteRow as V

Verdict = Literal["a", "b", "tie", "both_bad"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
MAX_LABEL = 200  # the label columns' length
MAX_OWNER = 200
MAX_LIST_LIMIT = 1000


@dataclass(frozen=True)
class CompareVote:
    id: str
    owner: str
    created_at: datetime  # aware, UTC
    verdict: Verdict
    targets: list[dict[str, Any]]  # A then B: {"label": str, "settings": {...}}
    prompt: str
    answers: list[str]  # A's text, then B's
    metrics: list[dict[str, Any]]  # A's figures, then B's (ttft_s, tokens_per_second, ...; any JSON object)

    @property
    def labels(self) -> tuple[str, str]:
        return self.targets[0]["label"], self.targets[1]["label"]


@dataclass(frozen=True)
class VoteOutcome:
    """What the leaderboard needs of a vote: who met whom, the verdict, the figures, when."""

    label_a: str
    label_b: str
    verdict: Verdict
    metrics_a: dict[str, Any]
    metrics_b: dict[str, Any]
    created_at: datetime


class CompareVoteStore(EngineStore):
    """Votes on one engine (app.storage.database.open_database). Thread-safe: it keeps no state but the engine's
    connection pool. Database failures raise StorageError."""

    def save(self, owner: str, targets: Sequence[Mapping[str, Any]], prompt: str, answers: Sequence[str],
             verdict: Verdict, metrics: Sequence[Mapping[str, Any]] | None = None,
             created_at: datetime | None = None) -> str:
        """Store a vote; returns its id. `targets`: A and B, each {"label": ..., "settings": {...}} (two different
        labels); `answers` and `metrics` (optional): A's then B's. ValueError for anything else, or what is no JSON
        (NaN included)."""
        if not isinstance(owner, str) or len(owner) > MAX_OWNER:
            raise ValueError(f"owner must be a string of at most {MAX_OWNER} characters")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
        pair = [_target(target, side) for target, side in zip(_two(targets, "targets"), "AB", strict=True)]
        if pair[0]["label"] == pair[1]["label"]:
            raise ValueError(f"a vote is between two different targets; both are {pair[0]['label']!r}")
        if not isinstance(prompt, str):
            raise ValueError("prompt must be a string")
        texts = _two(answers, "answers")
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("answers must be two strings, A's then B's")
        figures = _two(metrics, "metrics") if metrics is not None else [{}, {}]
        if not all(isinstance(item, Mapping) for item in figures):
            raise ValueError("metrics must be two JSON objects, A's then B's")
        figures = [dict(item) for item in figures]
        for name, value in (("targets", pair), ("metrics", figures)):
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name} must be JSON-serialisable: {exc}") from exc
        when = created_at if created_at is not None else datetime.now(UTC)
        if when.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")
        row = V(id=str(uuid.uuid4()), owner=owner, created_at=when, verdict=verdict, label_a=pair[0]["label"],
                label_b=pair[1]["label"], metrics=figures, targets=pair, prompt=prompt, answers=list(texts))
        with self._writing() as session:
            session.add(row)
        return row.id

    def get(self, owner: str, vote_id: str) -> CompareVote | None:
        with self._reading() as session:
            row = session.scalar(select(V).where(V.id == vote_id, V.owner == owner))
        return _vote(row) if row is not None else None

    def list(self, owner: str, limit: int = 100, offset: int = 0) -> builtins.list[CompareVote]:
        """The owner's votes, newest first."""
        if not 1 <= limit <= MAX_LIST_LIMIT or offset < 0:
            raise ValueError(f"limit must be 1..{MAX_LIST_LIMIT} and offset >= 0")
        query = (select(V).where(V.owner == owner).order_by(V.created_at.desc(), V.id.desc())
                 .limit(limit).offset(offset))
        with self._reading() as session:
            return [_vote(row) for row in session.scalars(query)]

    def delete(self, owner: str, vote_id: str) -> bool:
        """Delete a vote; False when the owner has none with this id."""
        with self._writing() as session:
            result = session.execute(delete(V).where(V.id == vote_id, V.owner == owner)
                                     .execution_options(synchronize_session=False))
            return rowcount(result) > 0

    def outcomes(self, owner: str | None = None) -> builtins.list[VoteOutcome]:
        """The votes for a leaderboard, oldest first (Elo's order): one owner's, or with None every owner's."""
        query = select(V.label_a, V.label_b, V.verdict, V.metrics, V.created_at)
        if owner is not None:
            query = query.where(V.owner == owner)
        query = query.order_by(V.created_at, V.id)
        with self._reading() as session:
            rows = session.execute(query).all()
        return [VoteOutcome(row.label_a, row.label_b, _verdict(row.verdict), *_pair_of_objects(row.metrics),
                            row.created_at) for row in rows]


def _two(items: Any, name: str) -> builtins.list[Any]:
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence) or len(items) != 2:
        raise ValueError(f"{name} must be two items, A's then B's")
    return list(items)


def _target(target: Any, side: str) -> dict[str, Any]:
    if not isinstance(target, Mapping):
        raise ValueError(f"target {side} must be an object with a label and settings")
    label, settings = target.get("label"), target.get("settings", {})
    if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL:
        raise ValueError(f"target {side}: the label must be a string of 1 to {MAX_LABEL} characters")
    if not isinstance(settings, Mapping):
        raise ValueError(f"target {side}: settings must be a JSON object")
    return {"label": label, "settings": dict(settings)}


def _verdict(value: str) -> Verdict:
    if value not in VERDICTS:  # written by hand, or by a later version: refuse rather than miscount
        raise ValueError(f"a stored vote has the verdict {value!r}, not one of {', '.join(VERDICTS)}")
    return value


def _pair_of_objects(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(item, dict) for item in value):
        return value[0], value[1]
    return {}, {}


def _vote(row: V) -> CompareVote:
    metrics = list(_pair_of_objects(row.metrics))
    return CompareVote(row.id, row.owner, row.created_at, _verdict(row.verdict), row.targets, row.prompt,
                       row.answers, metrics)
