"""Your own tools go here: a typed function with a Google-style docstring and @register_tool is all it takes.

The docstring's first paragraph tells the model what the tool does and each `Args:` line describes a parameter;
the type hints become the JSON Schema the arguments are checked against. Return text (or anything JSON can
encode); raise ToolError("...") for a failure the model should read. Restart the app to pick up changes.

A tool that says nothing about its effects asks before each call (its run policy, app/tools/policy.py), as
count_words below does; `@register_tool(hints=ToolHints.reader("Word count", open_world=False))` says it only
reads, and then its calls run as the model makes them.
"""

from __future__ import annotations

from app.tools.tool_registry import ToolError, register_tool


@register_tool
def count_words(text: str) -> str:
    """Count the words and characters of a text.

    Args:
        text: The text to count.
    """
    if not text.strip():
        raise ToolError("the text is empty.")
    return f"{len(text.split())} words, {len(text)} characters"
