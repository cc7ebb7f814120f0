"""What many tests share: streaming an answer from a client, opening the app in AppTest, driving the Chat page in
Chromium (Playwright), and the folder for artifacts worth keeping."""

from __future__ import annotations

import io
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from app.clients.client_protocol import Client, Delta, GenerationParams, ResponseFormat, ToolRequest

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"  # logs and screenshots worth keeping
MAIN = str(ROOT / "app" / "main.py")
DOCS = ROOT / "docs"  # the docs' screenshots: drawn by the browser tests, so they show the page as it is


# The pages' scripts, as AppTest names them: relative to app/main.py.
CHAT_PAGE = "frontends/streamlit/views/chat.py"
TOOLS_PAGE = "frontends/streamlit/views/tools.py"
ALL_TOOLS_PAGE = "frontends/streamlit/views/all_tools.py"
COMPARE_PAGE = "frontends/streamlit/views/compare.py"


# ----- clients -----------------------------------------------------------------------------------------------------

def collect(client: Client, messages: list[dict[str, Any]], params: GenerationParams | None = None,
            tools: ToolRequest | None = None, cancel: threading.Event | None = None,
            response_format: ResponseFormat | None = None) -> tuple[str, list[Delta]]:
    """Stream one answer to the end: its whole text and every delta (the last one carries the finish reason,
    metrics and tool calls). No `params`: `GenerationParams()`'s defaults."""
    params = params if params is not None else GenerationParams()
    deltas = list(client.stream(messages, params, cancel or threading.Event(), tools, response_format))
    return "".join(d.text for d in deltas), deltas


def complete(client: Client, prompt: str | list[int], params: GenerationParams, suffix: str | None = None,
             cancel: threading.Event | None = None) -> tuple[str, list[Delta]]:
    """A raw completion (`Client.complete`) to the end: its whole text and every delta."""
    deltas = list(client.complete(prompt, params, cancel or threading.Event(), suffix))
    return "".join(d.text for d in deltas), deltas


def at_once(threads: int, work: Callable[[int], None], timeout_s: float = 120) -> list[BaseException]:
    """Run `work(worker)` on `threads` threads released together by a barrier; what each raised, for the caller to
    assert empty."""
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            barrier.wait()
            work(worker)
        except BaseException as exc:  # returned to the caller
            failures.append(exc)

    workers = [threading.Thread(target=run, args=(worker,)) for worker in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout_s)
    return failures


# ----- the app in AppTest ------------------------------------------------------------------------------------------

def forget_preferences() -> None:
    """The local user's stored settings (app/frontends/streamlit/preferences.py) cleared in the database the app will
    use: each AppTest starts as a first visit, not with the settings an earlier test chose."""
    from app.frontends.streamlit.persistence import LOCAL_OWNER
    from app.storage import ConversationStore, StorageError
    from app.storage.database import open_database

    try:
        engine = open_database()
    except StorageError:
        return  # a test of an unreachable database: nothing is stored there
    try:
        ConversationStore(engine).set_preferences(LOCAL_OWNER, {})
    finally:
        engine.dispose()

@contextmanager
def open_app(monkeypatch: pytest.MonkeyPatch, model_dir: Path | str, *, page: str | None = None,
             timeout: float = 120, temperature: float | None = None,
             max_new_tokens: int | None = None) -> Iterator[AppTest]:
    """The app in AppTest on `model_dir` (DEMO_MODEL), fresh caches, run once and on `page` if given, with the
    sidebar's temperature and max new tokens set if given; clears Streamlit's resource cache again after."""
    import streamlit as st  # here, not at the top: the engine tests run on machines without the UI (a GPU box)
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DEMO_MODEL", str(model_dir))
    st.cache_resource.clear()
    forget_preferences()
    try:
        at = AppTest.from_file(MAIN, default_timeout=timeout)
        at.run()
        if page is not None:
            at.switch_page(page).run()
        assert not at.exception
        if temperature is not None:
            at.slider(key="temperature").set_value(temperature)
        if max_new_tokens is not None:
            at.number_input(key="max_new_tokens").set_value(max_new_tokens)
        if temperature is not None or max_new_tokens is not None:
            at.run()
        yield at
    finally:
        st.cache_resource.clear()


# ----- the Chat page in Chromium (Playwright) ----------------------------------------------------------------------

def readme_screenshot(page: Any, name: str, full_page: bool = False) -> None:
    """Save the page's screenshot as the README's docs/`name` (and in test-artifacts/): the README shows what the
    tests saw, not a picture from an older version of the page."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.mouse.move(700, 5)  # no tooltip or hover highlight in the picture
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)
    (DOCS / name).write_bytes((ARTIFACTS / name).read_bytes())


def model_loaded(page: Any, timeout: float = 180_000, model: str = "SmolLM2-135M-Instruct") -> None:
    """Wait until the page says which model it loaded (the caption under the title: drawn once the model is
    loaded, unlike the model picker's label, which names it from the start; the sidebar's settings name it too,
    hidden while their section is closed)."""
    page.get_by_test_id("stCaptionContainer").filter(has_text=model, visible=True).first.wait_for(timeout=timeout)


def generation_settings(page: Any) -> Any:
    """The sidebar's Generation settings section, opened (it starts collapsed)."""
    sidebar = page.get_by_test_id("stSidebar")
    section = sidebar.get_by_test_id("stExpander").filter(has_text="Generation settings").first
    if not section.get_by_role("spinbutton", name="Max new tokens").is_visible():
        section.get_by_text("Generation settings").first.click()
        section.get_by_role("spinbutton", name="Max new tokens").wait_for(timeout=10_000)
    return section


def set_number(page: Any, name: str, value: str) -> None:
    """A number of the sidebar's Generation settings ("Seed", "Max new tokens") typed, and the run that stores it
    waited out."""
    field = generation_settings(page).get_by_role("spinbutton", name=name)
    field.fill(value)
    field.press("Enter")
    page.wait_for_timeout(1000)


def open_chat(browser: Any, url: str, seed: str, height: int = 900) -> Any:
    """A new page (a new session) on the Chat page once the model is loaded, with the sidebar's Seed set."""
    page = browser.new_page(viewport={"width": 1280, "height": height})
    page.goto(url)
    model_loaded(page, 180_000)  # status line: model loaded
    set_number(page, "Seed", seed)
    return page


def ask(page: Any, text: str, answer_index: int) -> Any:
    """Send `text`; return the `answer_index`-th chat message once it is complete and the page has settled."""
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(text)
    box.press("Enter")
    answer = page.locator('[data-testid="stChatMessage"]').nth(answer_index)
    answer.get_by_text("tok/s").first.wait_for(timeout=180_000)
    settle(page, answer)
    return answer


def settle(page: Any, element: Any, timeout_s: float = 60) -> None:
    """Wait until the script has stopped running and `element` has shown the same text, with nothing stale in it,
    for 0.6 s. While a run draws the page, Streamlit keeps the previous run's elements on view (marked
    data-stale) until they are replaced: a loaded machine once showed a new answer's bubble as "waiting for the
    model..." under the previous answer's metrics line, and the test read that."""
    deadline = time.monotonic() + timeout_s
    last, steady = None, 0
    while steady < 3:
        assert time.monotonic() < deadline, f"the page did not settle: {element.inner_text()[:300]!r}"
        time.sleep(0.2)
        shown = element.inner_text()
        quiet = (not page.get_by_test_id("stStatusWidget").is_visible()
                 and element.locator('[data-stale="true"]').count() == 0)
        steady = steady + 1 if quiet and shown == last else 0
        last = shown


# ----- documents and pages for the web and document tools ----------------------------------------------------------

ARTICLE = b"""<html><head><title>Lighthouses of Brittany</title></head><body>
<nav>Home | About</nav>
<article><h1>Lighthouses of Brittany</h1>
<p>The Phare du Creac'h on Ouessant is one of the most powerful lighthouses in Europe, with a range of 32 nautical
miles. It guards the entrance to the English Channel, one of the busiest shipping lanes in the world.</p>
<p>Keepers lived in the tower until the light was automated in the late twentieth century, and the old engine
rooms now house a museum of lighthouses and beacons that is open to visitors all year round.</p>
</article><footer>Copyright</footer></body></html>"""


def html(body: bytes) -> Any:
    """A route for harness.local_http.serve that answers `body` as an HTML page."""
    return lambda handler, request: (200, {"Content-Type": "text/html; charset=utf-8"}, body)


def pdf_bytes(text: str) -> bytes:
    """A one-page PDF with `text` on it."""
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    page = canvas.Canvas(buffer)
    page.drawString(72, 720, text)
    page.save()
    return buffer.getvalue()


@contextmanager
def streamlit_app(env: dict[str, str], log_name: str = "streamlit.log") -> Iterator[str]:
    """The app as `make run` serves it (`streamlit run app/frontends/streamlit/web.py`: app/main.py behind its
    Content-Security-Policy) on a free 127.0.0.1 port with `env`; yields its URL, stops it after."""
    from harness.local_http import free_port
    from harness.processes import server_process

    if env.get("DEMO_DATABASE_URL") in (None, os.environ.get("DEMO_DATABASE_URL")):
        # A database of its own: the settings a user last chose come back in every new session, so an app sharing
        # the tests' database would start from another test's choices (max new tokens, tool choice, policies).
        env = {**env, "DEMO_DATABASE_URL": f"sqlite:///{tempfile.mkdtemp(prefix='demo-app-')}/conversations.db"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "streamlit", "run", "app/frontends/streamlit/web.py",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true"]
    with server_process(command, f"{url}/_stcore/health", cwd=ROOT, env=env, log=ARTIFACTS / log_name,
                        start_timeout_s=60):
        yield url


def require_llama_cpp() -> None:
    """Skip when llama-cpp-python is not installed (make setup-llamacpp builds it), unless REQUIRE_LLAMACPP=1 says it
    must be (make test-llamacpp): then fail."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("REQUIRE_LLAMACPP") == "1":
            raise RuntimeError("REQUIRE_LLAMACPP=1 but llama_cpp cannot be imported: run `make setup-llamacpp`") \
                from None
        pytest.skip("llama-cpp-python is not installed (make setup-llamacpp builds it)")


def end_answer(page: Any, bubble: Any) -> None:
    """Once `bubble` has streamed some text, press its Stop, unless the answer has ended by itself meanwhile (a small
    model may end after a dozen tokens): either way it ends with its metrics line, and the page settles."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    stop = bubble.get_by_role("button", name="Stop")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = bubble.inner_text()
        if stop.count() == 0 and "tok/s" in text:  # ended by itself
            break
        if stop.count() and len(text) >= 60 and "waiting for the model" not in text:
            try:
                stop.click(timeout=2_000)
            except PlaywrightError:  # it ended between the look and the click
                pass
            break
        time.sleep(0.1)
    expect(bubble.get_by_test_id("stCaptionContainer").filter(has_text="tok/s").first).to_be_visible(timeout=60_000)
    settle(page, bubble)


def wait_until_writing(bubble: Any, chars: int, timeout_s: float = 60,
                       until: Callable[[], bool] | None = None) -> str:
    """Wait until `bubble`'s answer is being written (its Stop button shows) with at least `chars` characters of
    text, and `until()` holds if given; return the text then."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = bubble.inner_text()
        if (bubble.get_by_role("button", name="Stop").count() and "waiting for the model" not in text
                and len(text) >= chars and (until is None or until())):
            return text
        assert time.monotonic() < deadline, f"no answer of {chars} characters being written: {text!r}"
        time.sleep(0.1)


def stop_and_check(page: Any, bubble: Any) -> None:
    """Once `bubble` streams some text, press its Stop: the text stops growing and is marked Stopped, with its
    metrics, without any further interaction."""
    wait_until_writing(bubble, 60)
    bubble.get_by_role("button", name="Stop").click(timeout=10_000)
    from playwright.sync_api import expect  # only the browser tests have playwright imported

    expect(bubble.get_by_text("Stopped")).to_be_visible(timeout=15_000)
    caption = bubble.get_by_test_id("stCaptionContainer").filter(has_text="Stopped").first
    expect(caption).to_contain_text("tokens")
    expect(caption).to_contain_text("tok/s")
    settle(page, bubble)  # the redraw after Stop (its actions replace the Stop button) may come late on a busy machine
    partial = bubble.inner_text()
    time.sleep(1.5)
    assert bubble.inner_text() == partial, "the answer kept growing after Stop"


def choose(page: Any, selectbox: Any, option: str) -> None:
    """Pick a selectbox option; a rerun still in flight can close the list, so try again if it does."""
    for _ in range(5):
        page.wait_for_timeout(500)
        selectbox.click()
        item = page.get_by_role("option", name=option, exact=True)
        try:
            item.click(timeout=3_000)
        except Exception:  # playwright's TimeoutError: the list closed before the click
            continue
        page.wait_for_timeout(500)
        inputs = selectbox.locator("input")
        shown = selectbox.inner_text() + (inputs.first.input_value() if inputs.count() else "")
        if option in shown:
            return
    raise AssertionError(f"could not choose {option!r}")


def open_popover(page: Any, button: Any, content: Any, attempts: int = 4) -> Any:
    """Open the popover behind `button` until `content` (something inside it) shows, and return `content`. A rerun
    still in flight when the button is clicked draws the page again and closes the popover it opened (CI once
    clicked Manage just after a preset was chosen, and the popover's buttons never showed); then click again. A
    click on an open popover would close it, so one that shows `content` is not clicked."""
    for _ in range(attempts):
        if content.is_visible():
            return content
        wait_until_idle(page)
        button.click()
        try:
            content.wait_for(state="visible", timeout=8_000)
        except Exception:  # playwright's TimeoutError: a redraw closed it, or it is still opening
            continue
    content.wait_for(state="visible", timeout=10_000)
    return content


def wait_until_idle(page: Any, timeout_s: float = 60) -> None:
    """Wait until Streamlit shows no run in flight (its status widget, "Running...", is hidden)."""
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=timeout_s * 1000)
