"""Tool-call dialects by name, and which one a chat template speaks.

Every dialect module in this package is imported here, and each Dialect subclass registers itself in `DIALECTS`
(see app/prompting/dialects/dialect.py): adding a dialect means adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from app.prompting.dialects.dialect import (
    DIALECTS,
    ConstrainedCall,
    Dialect,
    ParsedResponse,
    RenderedPrompt,
    StreamParser,
)

# Modules here that define no dialect; `constraint` would also pull in xgrammar, which only forced calls need.
_NOT_DIALECTS = frozenset({"base", "constraint"})

# For templates with no family's marker (SmolLM2, base models): taught by the fallback system prompt.
FALLBACK_DIALECT = "hermes"


def _import_dialect_modules() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _NOT_DIALECTS and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_import_dialect_modules()


@dataclass(frozen=True)
class Detection:
    dialect: Dialect
    by_marker: bool  # False: no dialect's marker was in the template, and this is the fallback


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call dialect {name!r}; choose one of {', '.join(DIALECTS)}") from None


def dialect_detection(chat_template: str | None) -> Detection:
    """The dialect whose marker `chat_template` contains (by `detection_priority` where several do), or the
    fallback, and which of the two it is."""
    template = chat_template or ""
    # sorted() is stable: dialects of equal priority are tried in `order`.
    for dialect in sorted(DIALECTS.values(), key=lambda d: -d.detection_priority):
        if dialect.detects(template):
            return Detection(dialect, by_marker=True)
    return Detection(DIALECTS[FALLBACK_DIALECT], by_marker=False)


def detect_dialect(chat_template: str | None) -> Dialect:
    """The dialect a chat template speaks; Hermes for a template with no family's marker."""
    return dialect_detection(chat_template).dialect


__all__ = [
    "DIALECTS", "FALLBACK_DIALECT", "ConstrainedCall", "Detection", "Dialect", "ParsedResponse", "RenderedPrompt",
    "StreamParser", "detect_dialect", "dialect_detection", "get_dialect",
]
