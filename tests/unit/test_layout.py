"""The layers: every package of app/ has its place in LAYERS and imports only its own and lower layers; no module
imports itself back through others; and the core (everything but app/frontends and app/main.py) never imports a
front end, Streamlit or FastAPI.

The core's modules are imported for real, one after another in a fresh interpreter, with an import hook that notes
which module's code asked for each new module, so a failure names the chain that pulled a front end in. The source
of every module is read too, for imports the runtime check cannot see (inside functions, in the front ends)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"

# The packages of app/, lowest first. A module may import its own package and the packages of lower layers only:
# never a higher layer, never another package of its own layer. app/__init__.py, app/config.py and app/registry.py
# (the registry idiom every table of names uses) are the floor.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("app", "app.config", "app.registry"),
    ("app.limits",),
    ("app.domain",),
    ("app.prompting",),
    ("app.telemetry",),
    ("app.tools", "app.clients"),
    ("app.models", "app.presets"),
    ("app.speech",),
    ("app.storage",),
    ("app.knowledge",),
    ("app.mcp_client",),
    ("app.agent",),
    ("app.compare",),
    ("app.evals",),
    ("app.frontends", "app.frontends.api", "app.frontends.mcp", "app.frontends.streamlit"),
    ("app.main",),
)
FRONT_ENDS = ("app/frontends", "app/main.py")
# Run by path, never imported: the sandbox's scripts (inside it, and the launchers that enter it) and Alembic's
# migration scripts.
SCRIPTS = ("app/tools/sandbox/inside", "app/tools/sandbox/launchers", "app/storage/migrations")
FORBIDDEN = ("streamlit", "fastapi", "app.frontends", "app.main")


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def is_under(path: Path, places: tuple[str, ...]) -> bool:
    rel = relative(path)
    return any(rel == place or rel.startswith(place + "/") for place in places)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


SOURCES = sorted(APP.rglob("*.py"))
CORE = [path for path in SOURCES if not is_under(path, FRONT_ENDS + SCRIPTS)]


def test_the_layout_names_real_places_and_the_core_is_what_remains():
    for place in FRONT_ENDS + SCRIPTS:
        assert (ROOT / place).exists(), f"{place} is gone: update the lists in tests/unit/test_layout.py"
    core = {module_name(path) for path in CORE}
    assert {"app", "app.agent.loop", "app.domain.conversation", "app.clients.client_protocol",
            "app.clients.hf.hf_client", "app.tools.tool_registry", "app.storage.repository",
            "app.mcp_client.manager"} <= core
    assert not {name for name in core if is_within(name, FORBIDDEN)}


# In the fresh interpreter: import each module, and after each say which forbidden modules came with it, and how.
PROBE = r'''
import importlib, json, sys

modules, forbidden, out = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2])), sys.argv[3]
asker = {}  # module -> the module whose code last asked for it while it was not loaded yet


def is_forbidden(name):
    return any(name == f or name.startswith(f + ".") for f in forbidden)


class Witness:
    """Finds nothing; notes which module's code is importing `name` (the importlib machinery left out)."""

    def find_spec(self, name, path=None, target=None):
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                     or frame.f_globals.get("__name__", "").startswith("importlib")):
            frame = frame.f_back
        if frame is not None:
            asker[name] = frame.f_globals.get("__name__", "?")
        return None


def chain(name, top):
    links = [name]
    while links[-1] != top and links[-1] in asker and asker[links[-1]] not in links and asker[links[-1]] != "__main__":
        links.append(asker[links[-1]])
    return " -> ".join(reversed(links))


sys.meta_path.insert(0, Witness())
report = {"already": sorted(m for m in sys.modules if is_forbidden(m)), "pulled": {}, "failed": {}}
for name in modules:
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    except Exception as exc:
        report["failed"][name] = f"{type(exc).__name__}: {exc}"
    new = sorted(m for m in sys.modules if m not in before and is_forbidden(m))
    roots = [m for m in new if not any(m.startswith(other + ".") for other in new)]
    if roots:
        report["pulled"][name] = [chain(root, name) for root in roots]
with open(out, "w") as file:
    json.dump(report, file)
'''


def probe(names: list[str], forbidden: tuple[str, ...], where: Path) -> dict:
    """Run PROBE in a fresh interpreter in `where`: which of `forbidden` each of `names` pulled in, and how."""
    out = where / "report.json"
    subprocess.run([sys.executable, "-c", PROBE, json.dumps(names), json.dumps(forbidden), str(out)], cwd=where,
                   check=True, timeout=300)
    return json.loads(out.read_text())


def test_importing_the_core_brings_in_no_front_end(tmp_path):
    report = probe([module_name(path) for path in CORE], FORBIDDEN, tmp_path)
    assert report["already"] == [], "a fresh interpreter already holds front-end modules"
    assert report["failed"] == {}, "core modules that do not import: " + json.dumps(report["failed"], indent=1)
    pulled = [f"{name}: {chain}" for name, chains in report["pulled"].items() for chain in chains]
    assert not pulled, "the core imports a front end (module imported -> ... -> front end):\n  " + "\n  ".join(pulled)


def test_the_probe_names_the_chain_that_pulled_a_front_end_in(tmp_path):
    (tmp_path / "front").mkdir()
    (tmp_path / "front" / "__init__.py").write_text("")
    (tmp_path / "front" / "widgets.py").write_text("")
    (tmp_path / "core_a.py").write_text("import core_b\n")
    (tmp_path / "core_b.py").write_text("import importlib\nfrom front import widgets\n"
                                        "importlib.import_module('front2')\n")
    (tmp_path / "front2.py").write_text("")
    (tmp_path / "core_c.py").write_text("import core_b\n")  # already loaded: pulls in nothing new
    report = probe(["core_a", "core_c", "no_such_module"], ("front", "front2"), tmp_path)
    assert report["pulled"] == {"core_a": ["core_a -> core_b -> front", "core_a -> core_b -> front2"]}
    assert report["failed"] == {"no_such_module": "ModuleNotFoundError: No module named 'no_such_module'"}


def imports(path: Path, source: str | None = None) -> Iterator[tuple[int, str]]:
    """Every module a file (or `source`, as if at `path`) imports, anywhere in it (functions too), as (line, absolute
    name); `from a import b` gives both a and a.b, since b may be a module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)


def test_the_source_agrees_the_core_imports_no_front_end_not_even_inside_a_function():
    found = [f"{relative(path)}:{line} imports {target}" for path in CORE for line, target in imports(path)
             if is_within(target, FORBIDDEN)]
    assert not found, "\n".join(found)


def layer_of(name: str) -> tuple[int, str]:
    """(layer, package) of a module of app/: its package is the longest entry of LAYERS it is within."""
    found = [(rank, package) for rank, packages in enumerate(LAYERS) for package in packages
             if is_within(name, (package,)) and (package != "app" or name == "app")]
    assert found, f"{name} is in no layer: add its package to LAYERS in tests/unit/test_layout.py"
    return max(found, key=lambda entry: len(entry[1]))


APP_MODULES = {module_name(path) for path in SOURCES}


def app_imports(path: Path) -> Iterator[tuple[int, str]]:
    """The modules of app/ that `path` imports, as an import checker counts them: `from package import module` is
    the module (not the package's __init__); `from module import name` is the module."""
    by_statement: dict[tuple[int, str], list[str]] = {}
    for line, target in imports(path):
        parent = target.rpartition(".")[0]
        if parent and (line, parent) in by_statement:
            by_statement[(line, parent)].append(target)
        else:
            by_statement[(line, target)] = []
    for (line, module), names in by_statement.items():
        submodules = [name for name in names if name in APP_MODULES]
        yield from ((line, name) for name in submodules)
        if module in APP_MODULES and (not names or len(submodules) < len(names)):
            yield line, module


def test_every_package_is_in_a_layer_and_imports_only_its_own_or_lower_layers():
    found = []
    for path in SOURCES:
        rank, package = layer_of(module_name(path))
        for line, target in app_imports(path):
            target_rank, target_package = layer_of(target)
            if target_package != package and target_rank >= rank:
                found.append(f"{relative(path)}:{line} imports {target} ({target_package} is not below {package})")
    assert not found, "upward or sideways imports:\n" + "\n".join(found)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_module_of_app_imports_itself_back_through_others():
    graph = {module_name(path): {target for _, target in app_imports(path)} - {module_name(path)} for path in SOURCES}
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert sorted(import_cycles(graph)) == [["a", "b", "c"], ["e", "e2"]]


def test_the_import_reader_resolves_relative_and_from_imports():
    source = ("from . import batch\nfrom ..client_protocol import Delta\nfrom app import frontends\n"
              "import app.frontends.streamlit.views.chat as chat\n")
    assert list(imports(APP / "clients" / "hf" / "hf_client.py", source)) == [
        (1, "app.clients.hf"), (1, "app.clients.hf.batch"), (2, "app.clients.client_protocol"),
        (2, "app.clients.client_protocol.Delta"), (3, "app"), (3, "app.frontends"),
        (4, "app.frontends.streamlit.views.chat"),
    ]
