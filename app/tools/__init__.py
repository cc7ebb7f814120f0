"""Tools the model may call: `load_tools()` is the built-in ones, listed in BUILTIN_TOOLS, and the user's own (the
functions of app/tools/custom.py marked with @register_tool)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from app.registry import Registry
from app.tools.tool_registry import ToolRegistry, marked_tools

# name -> its function ("module:function", marked with @register_tool there); imported by the first load_tools().
BUILTIN_TOOLS: Registry[Callable[..., Any]] = Registry("built-in tool")
BUILTIN_TOOLS.add_lazy("random_number", "app.tools.builtin:random_number")
BUILTIN_TOOLS.add_lazy("current_time", "app.tools.builtin:current_time")
BUILTIN_TOOLS.add_lazy("calculator", "app.tools.builtin:calculator")
BUILTIN_TOOLS.add_lazy("convert_units", "app.tools.builtin:convert_units")
BUILTIN_TOOLS.add_lazy("get_weather", "app.tools.weather:get_weather")

CUSTOM_TOOLS_MODULE = "app.tools.custom"  # your own tools: each function there marked with @register_tool
CUSTOM_TOOLS_AFTER = "convert_units"  # where your own come in the list the pages show: after the offline built-ins


@functools.cache
def load_tools() -> ToolRegistry:
    """The built-in tools and the user's own; one registry per process, read-only once built."""
    registry = ToolRegistry()
    for name in BUILTIN_TOOLS:
        tool = registry.add_marked(BUILTIN_TOOLS[name])
        if tool.name != name:
            raise ValueError(f"BUILTIN_TOOLS names {BUILTIN_TOOLS.reference(name)} {name!r}, but it is {tool.name!r}")
        if name == CUSTOM_TOOLS_AFTER:
            for function in marked_tools(vars(importlib.import_module(CUSTOM_TOOLS_MODULE))):
                registry.add_marked(function)
    return registry
