"""PresetStore: each user's saved presets (table presets), by name. Every method takes the owner first and only
touches that owner's rows. The built-in presets (app/presets/built_in.py) are not stored: their names are reserved.

A preset's settings are checked (app/presets/preset.py) on the way in and again on the way out: a row written by an
older version that no longer passes is skipped with a warning, never handed to the sidebar."""

from __future__ import annotations

import builtins
import logging
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from app.presets.built_in import BUILT_IN
from app.presets.preset import MAX_PRESETS, Preset, PresetError, parse_preset
from app.storage.database import rowcount
from app.storage.sessions import EngineStore
from app.storage.tables import PresetRow as P

log = logging.getLogger(__name__)
RESERVED = frozenset(unicodedata.normalize("NFKC", preset.name).casefold() for preset in BUILT_IN)
BUILT_IN_MARK = "· built-in"  # how the sidebar labels the built-in ones: no user's preset may look like one


class PresetStore(EngineStore):
    """Presets on one engine. Thread-safe; database failures raise StorageError."""

    def list(self, owner: str) -> builtins.list[Preset]:
        """The owner's presets by name."""
        with self._reading() as session:
            rows = session.execute(select(P.name, P.settings).where(P.owner == owner).order_by(P.name)).all()
        presets = []
        for name, settings in rows:
            try:
                if not isinstance(settings, dict):
                    raise PresetError(f"{name!r} is stored as {type(settings).__name__}, not an object")
                presets.append(parse_preset({**settings, "name": name}))
            except PresetError as exc:
                log.warning("A stored preset no longer passes its checks, skipped: %s", exc)
        return presets

    def save(self, owner: str, preset: Preset, replaces: str | None = None) -> None:
        """Store `preset` under its name: a new one, or the owner's preset `replaces` (edited, maybe renamed).
        PresetError when the name is a built-in's or another of theirs, or the owner keeps MAX_PRESETS already."""
        _check_name(preset.name)
        settings = {key: value for key, value in preset.stored().items() if key != "name"}
        now = datetime.now(UTC)
        with self._writing() as session:
            taken = session.scalar(select(P).where(P.owner == owner, P.name == preset.name))
            edited = session.scalar(select(P).where(P.owner == owner, P.name == replaces)) if replaces else None
            if taken is not None and taken is not edited:
                raise PresetError(f"You have a preset named {preset.name!r} already: pick another name, or choose "
                                  "it and update it.")
            if edited is None:
                count = session.scalar(select(func.count()).where(P.owner == owner)) or 0
                if count >= MAX_PRESETS:
                    raise PresetError(f"You keep {MAX_PRESETS} presets, the most allowed: delete some first.")
                session.add(P(id=str(uuid.uuid4()), owner=owner, name=preset.name, settings=settings,
                              created_at=now, updated_at=now))
            else:
                edited.name, edited.settings, edited.updated_at = preset.name, settings, now
            try:
                session.flush()
            except IntegrityError as exc:  # saved by another tab at the same moment
                raise PresetError(f"You have a preset named {preset.name!r} already: pick another name.") from exc

    def import_all(self, owner: str, presets: Sequence[Preset]) -> tuple[int, int]:
        """Store every preset of an imported file, replacing the owner's presets of the same names, in one
        transaction: all or none. (added, replaced); PresetError before anything is stored."""
        for preset in presets:
            _check_name(preset.name)
        now = datetime.now(UTC)
        added = replaced = 0
        with self._writing() as session:
            kept = {row.name: row for row in session.scalars(select(P).where(P.owner == owner))}
            if len(kept.keys() | {preset.name for preset in presets}) > MAX_PRESETS:
                raise PresetError(f"With these you would keep more than {MAX_PRESETS} presets, the most allowed: "
                                  "delete some first.")
            for preset in presets:
                settings = {key: value for key, value in preset.stored().items() if key != "name"}
                row = kept.get(preset.name)
                if row is None:
                    session.add(P(id=str(uuid.uuid4()), owner=owner, name=preset.name, settings=settings,
                                  created_at=now, updated_at=now))
                    added += 1
                else:
                    row.settings, row.updated_at = settings, now
                    replaced += 1
            try:
                session.flush()
            except IntegrityError as exc:
                raise PresetError("Presets of these names were saved in another tab just now: import again.") \
                    from exc
        return added, replaced

    def delete(self, owner: str, name: str) -> bool:
        with self._writing() as session:
            return rowcount(session.execute(delete(P).where(P.owner == owner, P.name == name))) > 0


def _check_name(name: str) -> None:
    folded = unicodedata.normalize("NFKC", name).casefold()
    if folded in RESERVED or folded.endswith(BUILT_IN_MARK) or BUILT_IN_MARK in folded:
        raise PresetError(f"{name!r} is a built-in preset's name (or looks like one): pick another.")
