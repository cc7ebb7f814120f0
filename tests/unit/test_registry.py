"""app/registry.py, the one table of names the backends, dialects and built-in tools use: eager entries, lazy
"module:attribute" ones imported on first read, names in the order added, a taken name refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.registry import Registry, load


def test_lazy_entries_load_when_first_read_and_build_once():
    built = []
    registry: Registry[object] = Registry("thing", build=lambda value: built.append(value) or ("built", value))
    registry.add("eager", 1)
    registry.add_lazy("dumps", "json:dumps")
    registry.add_lazy("missing", "app.no_such_module:thing")
    assert list(registry) == ["eager", "dumps", "missing"] and len(registry) == 3 and "dumps" in registry
    assert built == [1] and registry.reference("dumps") == "json:dumps" and registry.reference("eager") is None
    import json

    assert registry["dumps"] == ("built", json.dumps) and registry["dumps"] is registry["dumps"]
    assert built == [1, json.dumps]
    with pytest.raises(ModuleNotFoundError):
        registry["missing"]
    with pytest.raises(KeyError):
        registry["nope"]
    assert registry.unknown("nope") == "unknown thing 'nope'; choose one of: eager, dumps, missing"


def test_a_taken_name_and_a_bad_reference_are_refused():
    registry: Registry[object] = Registry("thing")
    registry.add_lazy("a", "json:dumps")
    with pytest.raises(ValueError, match="'a' is defined twice"):
        registry.add("a", 1)
    with pytest.raises(ValueError, match="not a 'module:attribute'"):
        registry.add_lazy("b", "json.dumps")
    registry.remove("a")
    registry.add("a", 1)
    assert registry["a"] == 1
    assert load("os.path:join.__name__") == "join"


def test_listing_backends_dialects_and_tools_imports_none_of_them():
    probe = """
import sys
from app.clients.backends import BACKENDS
from app.prompting.dialects import DIALECTS
from app.tools import BUILTIN_TOOLS
names = list(BACKENDS), list(DIALECTS), list(BUILTIN_TOOLS), [BACKENDS[name].label for name in BACKENDS]
print(sorted(m for m in ("app.clients.hf.hf_client", "app.clients.vllm", "app.clients.openai",
                         "app.prompting.dialects.glm4", "app.tools.builtin", "app.tools.weather", "app.tools.custom")
             if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_the_tools_are_the_listed_ones_and_importing_a_tool_module_registers_nothing():
    import importlib

    from app.tools import BUILTIN_TOOLS, load_tools

    importlib.import_module("app.tools.builtin")  # the point: importing a tool module must change nothing

    names = load_tools().names
    assert names == ["random_number", "current_time", "calculator", "convert_units", "count_words", "get_weather"]
    assert set(BUILTIN_TOOLS) == set(names) - {"count_words"}  # count_words: app/tools/custom.py, found by its mark
    assert load_tools() is load_tools()
