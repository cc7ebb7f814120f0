"""Tool-call dialects by name, and which one a chat template speaks."""

from __future__ import annotations

from app.dialects.base import ConstrainedCall, Dialect, ParsedResponse, RenderedPrompt, StreamParser
from app.dialects.glm4 import GLM4Dialect
from app.dialects.hermes import HermesDialect
from app.dialects.llama3 import Llama3JsonDialect

DIALECTS: dict[str, Dialect] = {d.name: d for d in (HermesDialect(), GLM4Dialect(), Llama3JsonDialect())}


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call dialect {name!r}; choose one of {', '.join(DIALECTS)}") from None


def detect_dialect(chat_template: str | None) -> Dialect:
    """The dialect a chat template speaks, from the markers only that family's templates contain.
    Templates with none of them (SmolLM2, base models) get Hermes, taught by the fallback system prompt."""
    template = chat_template or ""
    if "<|observation|>" in template:
        return DIALECTS["glm4"]
    if "<|python_tag|>" in template or ("<|start_header_id|>" in template and "parameters" in template):
        return DIALECTS["llama3_json"]
    return DIALECTS["hermes"]


__all__ = [
    "DIALECTS", "ConstrainedCall", "Dialect", "ParsedResponse", "RenderedPrompt", "StreamParser", "detect_dialect",
    "get_dialect",
]
