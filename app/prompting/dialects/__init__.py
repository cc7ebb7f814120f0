"""Tool-call dialects by name, and which one a chat template speaks.

`DIALECTS` lists each dialect's class by its import path, in the order the UI offers them: adding a dialect means
adding a module with a Dialect subclass and its line here. A dialect's module is imported, and the class
instantiated once, when the dialect is first read (detection reads them all).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.prompting.dialects.dialect import (
    ConstrainedCall,
    Dialect,
    ParsedResponse,
    RenderedPrompt,
    StreamParser,
)
from app.registry import Registry

# For templates with no family's marker (SmolLM2, base models): taught by the fallback system prompt.
FALLBACK_DIALECT = "hermes"

# name -> its class; each entry's `name` is the class's own (tests/test_dialects.py checks it).
DIALECTS: Registry[Dialect] = Registry("tool-call dialect", build=lambda cls: cls())
DIALECTS.add_lazy("hermes", "app.prompting.dialects.hermes:HermesDialect")
DIALECTS.add_lazy("glm4", "app.prompting.dialects.glm4:GLM4Dialect")
DIALECTS.add_lazy("llama3_json", "app.prompting.dialects.llama3:Llama3JsonDialect")


@dataclass(frozen=True)
class Detection:
    dialect: Dialect
    by_marker: bool  # False: no dialect's marker was in the template, and this is the fallback


def get_dialect(name: str) -> Dialect:
    if name not in DIALECTS:
        raise ValueError(DIALECTS.unknown(name))
    return DIALECTS[name]


def dialect_detection(chat_template: str | None) -> Detection:
    """The dialect whose marker `chat_template` contains (by `detection_priority` where several do), or the
    fallback, and which of the two it is."""
    template = chat_template or ""
    # sorted() is stable: dialects of equal priority are tried in DIALECTS' order.
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
