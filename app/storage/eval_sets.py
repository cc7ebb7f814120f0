"""EvalSetStore: each user's eval sets (table eval_sets), one JSON document each, and their runs' reports (table
eval_runs). Every method takes the owner first and touches that owner's rows only. The documents' shape is
app/evals/cases.py's, checked there: this layer stores what it is given and hands it back."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from app.storage.database import rowcount
from app.storage.errors import VersionConflict
from app.storage.sessions import EngineStore
from app.storage.tables import EvalRunRow as R
from app.storage.tables import EvalSetRow as S

MAX_RUNS_KEPT = 50  # per set: the oldest reports go


class EvalSetTaken(ValueError):
    """Another of the owner's sets has that name."""


@dataclass(frozen=True)
class StoredEvalSet:
    id: str
    name: str
    document: dict[str, Any]
    version: int
    updated_at: datetime


class EvalSetStore(EngineStore):
    def list(self, owner: str) -> builtins.list[StoredEvalSet]:
        """The owner's sets by name."""
        with self._reading() as session:
            rows = session.scalars(select(S).where(S.owner == owner).order_by(S.name)).all()
            return [StoredEvalSet(row.id, row.name, row.document, row.version, row.updated_at) for row in rows]

    def get(self, owner: str, name: str) -> StoredEvalSet | None:
        with self._reading() as session:
            row = session.scalar(select(S).where(S.owner == owner, S.name == name))
            return None if row is None else StoredEvalSet(row.id, row.name, row.document, row.version,
                                                          row.updated_at)

    def save(self, owner: str, name: str, document: Mapping[str, Any], expected_version: int | None = None) -> int:
        """Store the set `name`: a new one when `expected_version` is None (EvalSetTaken if the name is taken),
        else replacing the stored one if it is still at that version (VersionConflict otherwise). Returns the
        version now stored."""
        now = datetime.now(UTC)
        with self._writing() as session:
            if expected_version is None:
                session.add(S(id=str(uuid.uuid4()), owner=owner, name=name, document=dict(document), version=1,
                              created_at=now, updated_at=now))
                try:
                    session.flush()
                except IntegrityError:
                    raise EvalSetTaken(f"You have an eval set named {name!r} already.") from None
                return 1
            changed = session.execute(
                update(S).where(S.owner == owner, S.name == name, S.version == expected_version)
                .values(document=dict(document), version=S.version + 1, updated_at=now)
                .execution_options(synchronize_session=False))
            if rowcount(changed) == 0:
                actual = session.scalar(select(S.version).where(S.owner == owner, S.name == name))
                raise VersionConflict(name, expected_version, actual if actual is not None else -1)
            return expected_version + 1

    def delete(self, owner: str, name: str) -> bool:
        with self._writing() as session:
            return rowcount(session.execute(delete(S).where(S.owner == owner, S.name == name))) > 0

    def add_run(self, owner: str, name: str, report: Mapping[str, Any]) -> str:
        """Keep a run's report with its set (the newest MAX_RUNS_KEPT are kept). LookupError: no such set."""
        now = datetime.now(UTC)
        with self._writing() as session:
            set_id = session.scalar(select(S.id).where(S.owner == owner, S.name == name))
            if set_id is None:
                raise LookupError(f"no eval set named {name!r}")
            run_id = str(uuid.uuid4())
            session.add(R(id=run_id, set_id=set_id, created_at=now, report=dict(report)))
            session.flush()
            kept = select(R.id).where(R.set_id == set_id).order_by(R.created_at.desc()).limit(MAX_RUNS_KEPT)
            session.execute(delete(R).where(R.set_id == set_id, R.id.not_in(kept.scalar_subquery()))
                            .execution_options(synchronize_session=False))
        return run_id

    def runs(self, owner: str, name: str, limit: int = 10) -> builtins.list[dict[str, Any]]:
        """The set's reports, newest first."""
        with self._reading() as session:
            return [report for report in session.scalars(
                select(R.report).join(S, S.id == R.set_id).where(S.owner == owner, S.name == name)
                .order_by(R.created_at.desc()).limit(limit)).all()]
