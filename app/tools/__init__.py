"""Tools the model may call. Importing `load_tools()` registers the built-in ones and the user's own file."""

from __future__ import annotations

from app.tools.registry import ToolRegistry, default_registry


def load_tools() -> ToolRegistry:
    from app.tools import builtin, custom, weather  # noqa: F401  (registration happens at import)

    return default_registry
