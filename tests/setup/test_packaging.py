"""The package's parts (pyproject.toml's extras, one requirements file each): `pip install .[api]` serves the API and
`pip install .[mcp]` the MCP server, without Streamlit, the other front end's packages or (for the API) Jupyter.

Two checks: each entry point's import closure (read from the source, imports inside functions included) is covered by
the distributions its extra declares with the base; and each server really starts and answers in a fresh interpreter
whose import system refuses every package its extra does not bring."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.local_http import free_port
from harness.processes import server_process
from tests.helpers import ARTIFACTS, ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DYNAMIC = PYPROJECT["tool"]["setuptools"]["dynamic"]


def requirements(file: str) -> dict[str, Requirement]:
    found: dict[str, Requirement] = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert not line.startswith("-"), f"{file}: setuptools reads no pip options ({line})"
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = requirement
    return found


def part(extra: str | None) -> dict[str, Requirement]:
    """The distributions `pip install .` (extra None) or `pip install .[extra]` declares, the base's included."""
    files = list(DYNAMIC["dependencies"]["file"])
    if extra is not None:
        files += DYNAMIC["optional-dependencies"][extra]["file"]
    found: dict[str, Requirement] = {}
    for file in files:
        found.update(requirements(file))
    return found


# ----- the import closure ------------------------------------------------------------------------------------------

def source_of(module: str) -> Path | None:
    path = ROOT.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def imports_of(module: str, path: Path) -> list[str]:
    """Absolute names of what `module` imports anywhere in its source (`from a import b` gives a and a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_closure(*starts: str) -> dict[str, str]:
    """Third-party top-level module -> the app module importing it, over every app module `starts` reach."""
    seen: set[str] = set()
    third_party: dict[str, str] = {}
    todo = list(starts)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = source_of(module)
        assert path is not None, f"{module} has no source under {ROOT}"
        for name in imports_of(module, path):
            top = name.split(".")[0]
            if top == "app":
                parts = name.split(".")
                todo += [prefix for i in range(1, len(parts) + 1)
                         if source_of(prefix := ".".join(parts[:i])) and prefix not in seen]
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.setdefault(top, module)
    return third_party


def uncovered(closure: dict[str, str], declared: set[str]) -> list[str]:
    distributions = packages_distributions()
    problems = []
    for name, where in sorted(closure.items()):
        dists = {canonicalize_name(dist) for dist in distributions.get(name, [])}
        if not dists & declared:
            problems.append(f"{name} (imported by {where}, from {', '.join(sorted(dists)) or 'nothing installed'})")
    return problems


# What each part promises: the modules `pip install .[extra]` runs. The core's backends are named by "module:Class"
# strings (app/clients/backends.py), which no import statement reaches: the base promises the transformers one and the
# OpenAI-compatible one; vLLM's and llama.cpp's engines are their extras'.
ENTRY_POINTS: dict[str | None, tuple[str, ...]] = {
    None: ("app.agent.loop", "app.clients.backends", "app.clients.hf.hf_client", "app.clients.openai",
           "app.clients.llamacpp.llamacpp_client", "app.prompting.dialects", "app.prompting.dialects.constraint",
           "app.storage.repository", "app.storage.mcp_tokens", "app.tools", "app.compare.__main__",
           "app.models.__main__"),
    "api": ("app.frontends.api.__main__",),
    "mcp": ("app.frontends.mcp.__main__",),
    "ui": ("app.main", *(".".join(path.relative_to(ROOT).with_suffix("").parts)
                         for path in sorted((ROOT / "app/frontends/streamlit").rglob("*.py")))),
}
ENGINES = {"vllm": "vllm", "llamacpp": "llama_cpp"}  # extra -> the engine it brings, imported by its client


@pytest.mark.parametrize("extra", list(ENTRY_POINTS), ids=lambda extra: extra or "base")
def test_each_part_declares_what_its_entry_points_import(extra):
    closure = import_closure(*(start for key in ENTRY_POINTS if key in (None, extra) for start in ENTRY_POINTS[key]))
    closure = {name: where for name, where in closure.items() if name not in ENGINES.values()}
    assert uncovered(closure, set(part(extra))) == []


@pytest.mark.parametrize(("extra", "engine"), list(ENGINES.items()))
def test_the_engine_extras_declare_their_engine(extra, engine):
    client = {"vllm": "app.clients.vllm", "llamacpp": "app.clients.llamacpp.runner"}[extra]
    assert engine in import_closure(client)
    assert set(part(extra)) - set(part(None)) == {canonicalize_name(engine.replace("_", "-").replace("llama-cpp",
                                                                                                "llama-cpp-python"))}


def test_the_closure_check_can_fail():
    """The API's closure without the [api] extra lacks FastAPI; the base's without its own files lacks torch."""
    assert any(problem.startswith("fastapi ") for problem in uncovered(import_closure("app.frontends.api.__main__"),
                                                                         set(part(None))))
    assert any(problem.startswith("torch ") for problem in uncovered(import_closure("app.clients.hf.hf_client"), set()))


def test_a_package_in_several_parts_has_one_pin_and_make_setup_installs_every_front_end():
    pins: dict[str, tuple[str, str]] = {}
    for extra in [None, *DYNAMIC["optional-dependencies"]]:
        for name, requirement in part(extra).items():
            pin = str(requirement)
            assert pins.setdefault(name, (pin, str(extra)))[0] == pin, f"{name}: {pin} in [{extra}], {pins[name]}"
    # requirements.txt (make setup) names the base and the front ends' parts; dev.txt comes beside it.
    named = [line.split()[1] for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("-r")]
    assert sorted(named) == sorted([*DYNAMIC["dependencies"]["file"], *(
        file for extra in ("api", "mcp", "ui") for file in DYNAMIC["optional-dependencies"][extra]["file"])])
    makefile = (ROOT / "Makefile").read_text()
    assert "-r requirements.txt -r requirements/dev.txt" in makefile
    assert "-r requirements/vllm.txt" in makefile


def test_the_llamacpp_extra_pins_the_version_make_setup_builds():
    from app.clients.llamacpp import build

    assert str(part("llamacpp")["llama-cpp-python"]) == build.PACKAGE
    assert f"llama-cpp-python=={build.VERSION}" in (ROOT / "Makefile").read_text()


def test_the_wheel_holds_the_app_only():
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["app*"]


# ----- the servers, with every other part's packages refused --------------------------------------------------------

# Packages only the Streamlit pages need (and, for the API, only the MCP server and the code interpreter): the
# interpreter refuses them as if they were not installed.
UI_ONLY = ("streamlit", "authlib")  # (markdown-it-py comes with the base anyway, through rich)
BLOCKED = {
    # (The document readers are the API's too: files are read into vector stores.)
    "api": (*UI_ONLY, "jupyter_client", "ipykernel", "zmq", "pyseccomp", "matplotlib", "pandas", "mcp",
            "trafilatura", "ddgs"),
    "mcp": (*UI_ONLY, "fastapi", "prometheus_client"),
}

# Run as `python -c LAUNCHER MODULES DISTRIBUTIONS MODULE ARGS...`: every finder on sys.meta_path is wrapped so that the
# blocked modules are not found (importlib.util.find_spec says None, `import` raises ModuleNotFoundError) and the
# blocked distributions have no metadata, as if they were not installed; each refusal is noted on stderr. Then
# MODULE runs as `python -m MODULE ARGS...` would.
LAUNCHER = r"""
import re, runpy, sys

blocked, dists = frozenset(sys.argv[1].split(",")), frozenset(sys.argv[2].split(","))

class Hiding:
    def __init__(self, finder):
        self.finder = finder

    def __getattr__(self, name):
        return getattr(self.finder, name)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            print(f"packaging test: refused import of {name}", file=sys.stderr, flush=True)
            return None
        find_spec = getattr(self.finder, "find_spec", None)
        return find_spec(name, path, target) if find_spec is not None else None

    def find_distributions(self, *args, **kwargs):
        find = getattr(self.finder, "find_distributions", None)
        for dist in find(*args, **kwargs) if find is not None else ():
            if re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower() not in dists:
                yield dist

sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
module = sys.argv[3]
sys.argv = [module, *sys.argv[4:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def installed_with(extra: str) -> set[str]:
    """The distributions `pip install .[extra]` installs: the part's own and, recursively, what they require."""
    found: set[str] = set()
    todo = list(part(extra).values())
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            needed = Requirement(line)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": wanted}) for wanted in extras):
                todo.append(needed)
    return found


def blocked_command(extra: str, module: str, *args: str) -> list[str]:
    distributions = packages_distributions()
    installed = installed_with(extra)
    dists: set[str] = set()
    for name in BLOCKED[extra]:  # each one a package that this part does not install
        dists |= {canonicalize_name(dist) for dist in distributions.get(name, [name])}
        assert not dists & installed, name
    return [sys.executable, "-c", LAUNCHER, ",".join(BLOCKED[extra]), ",".join(sorted(dists)), module, *args]


def test_the_refusing_interpreter_refuses(tmp_path):
    (tmp_path / "probe.py").write_text("import importlib.metadata, importlib.util, json\n"
                                       "assert importlib.util.find_spec('pandas') is None\n"
                                       "try:\n    importlib.metadata.version('pandas')\n"
                                       "except importlib.metadata.PackageNotFoundError:\n    import pandas\n")
    result = subprocess.run(blocked_command("api", "probe"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "refused import of pandas" in result.stderr and "ModuleNotFoundError" in result.stderr
    (tmp_path / "probe.py").write_text("import sys, httpx\nprint(sys.argv[1:])\n")
    result = subprocess.run(blocked_command("api", "probe", "--x"), cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout) == (0, "['--x']\n"), result.stderr


def test_the_api_serves_a_chat_completion_with_the_api_extra_only(tiny_model_dir, tmp_path):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for setting in ("DEMO_MODEL", "DEMO_BACKEND", "DEMO_SERVER_API_KEY", "DEMO_API_KEY"):
        env.pop(setting, None)
    command = blocked_command("api", "app.frontends.api", "--host", "127.0.0.1", "--port", str(port),
                              "--backend", "hf", "--model", str(tiny_model_dir))
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "packaging-api.log"
    with server_process(command, f"http://127.0.0.1:{port}/health", cwd=tmp_path, env=env, log=log,
                        start_timeout_s=300, lifetime_s=600):
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120, json={
            "model": tiny_model_dir.name, "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] >= 1


def test_the_mcp_server_lists_its_tools_with_the_mcp_extra_only(tmp_path):
    from mcp import Client, StdioServerParameters, stdio_client

    command = blocked_command("mcp", "app.frontends.mcp")
    log = tmp_path / "server.log"

    async def listed() -> set[str]:
        parameters = StdioServerParameters(command=command[0], args=command[1:], cwd=ROOT,
                                           env={"DEMO_SESSIONS_DIR": str(tmp_path / "sessions")})
        with open(log, "w") as errlog:
            async with Client(stdio_client(parameters, errlog=errlog)) as client:
                return {tool.name for tool in (await client.list_tools()).tools}

    names = asyncio.run(asyncio.wait_for(listed(), 120))
    errors = log.read_text()
    assert {"calculator", "get_weather", "web_search", "open_url"} <= names, (names, errors)
    # The code interpreter needs bubblewrap too (which cannot enter a worktree's symlinked .venv): without it the
    # server says why, and that reason must not be a refused import.
    assert "python" in names or ("The python tool is not offered" in errors and "refused" not in errors), errors
