"""No request leaves the browser for untrusted text, in the real thing: `streamlit run` on a SQLite file holding a
conversation whose title, user and assistant text, thought, tool-call name, tool pictures, error, document names and
picture names carry remote images (markdown, reference-style, raw HTML <img>/<link>/<iframe>/<video>/<audio>/CSS
url(), autolinked image URLs) pointing at a listener on 127.0.0.1. Chromium opens it by its link, every section is
expanded, the page is reloaded, a hostile message is sent live: the listener gets no request at all."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.storage import ConversationStore, open_database
from tests.helpers import ARTIFACTS, generation_settings, streamlit_app
from tests.pages.test_remote_images_page import one_line, payload, store_hostile_conversation


@contextmanager
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on a free 127.0.0.1 port that records the path of every request; yields (base URL, paths)."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            paths.append(self.path)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()


def expand_everything(page: Any) -> None:
    """Open every collapsed section (thoughts, tool cards, documents) and the history's own sections."""
    for summary in page.locator('[data-testid="stExpander"] summary').all():
        summary.click()
    page.wait_for_timeout(500)
    popover = page.get_by_test_id("stSidebar").get_by_role("button", name="Delete")
    if popover.count():
        popover.first.click()  # the popover that names the conversation
        page.wait_for_timeout(500)
        page.keyboard.press("Escape")


def wait_for_the_conversation(page: Any) -> None:
    page.locator('[data-testid="stChatMessage"]').nth(1).wait_for(timeout=120_000)
    page.get_by_text("error:").first.wait_for(timeout=60_000)  # the last message is drawn
    page.get_by_test_id("stSidebar").get_by_text("title").first.wait_for(timeout=60_000)  # and the history


def test_no_request_leaves_the_browser_for_hostile_text(tiny_model_dir, browser, tmp_path):
    database = f"sqlite:///{tmp_path / 'conversations.db'}"
    with listener() as (base, requests):
        store = ConversationStore(open_database(database))
        conversation_id = store_hostile_conversation(store, base)
        env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1", "DEMO_DATABASE_URL": database}
        with streamlit_app(env, "streamlit-remote-images.log") as url:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            elsewhere: list[str] = []  # any request not to the app itself (the favicon once came from Google)
            page.on("request", lambda request: elsewhere.append(request.url)
                    if not request.url.startswith((url, "data:", "blob:")) else None)
            page.goto(f"{url}/?c={conversation_id}")
            wait_for_the_conversation(page)
            expand_everything(page)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "remote-images.png"), full_page=True)
            phases = {"first load": len(requests)}

            page.reload()  # a title used to fire again on every page load
            wait_for_the_conversation(page)
            expand_everything(page)
            page.wait_for_timeout(2000)
            phases["reload"] = len(requests) - sum(phases.values())

            # Live: a hostile message typed into a new conversation is drawn, saved and titles the history.
            page.get_by_test_id("stSidebar").get_by_role("button", name="New conversation").click()
            page.wait_for_timeout(1000)
            box = page.get_by_test_id("stChatInputTextArea")
            tokens = generation_settings(page).get_by_role("spinbutton", name="Max new tokens")
            tokens.fill("16")
            tokens.press("Enter")
            page.wait_for_timeout(1000)
            box.fill(one_line(base, "live-title") + "\n\n" + payload(base, "live"))
            box.press("Enter")
            page.locator('[data-testid="stChatMessage"]').nth(1).get_by_text("tok/s").first.wait_for(timeout=120_000)
            page.wait_for_timeout(2000)
            phases["live message"] = len(requests) - sum(phases.values())
            page.close()
        fields = sorted({path.split("?")[0].split("/")[1] for path in requests})
        assert requests == [], f"{len(requests)} requests ({phases}) for {len(fields)} fields {fields}: {requests}"
        assert elsewhere == []
