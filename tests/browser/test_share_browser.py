"""A conversation shared as one HTML page, opened in Chromium as its recipient would: with the network off, the page
shows the conversation (its picture drawn from the file itself) and makes no request at all, though its messages
try scripts, remote pictures, frames and styles (tests/unit/test_share_html.py builds them)."""

from __future__ import annotations

from app.frontends.streamlit.share_html import conversation_html
from tests.unit.test_share_html import conversation


def test_a_shared_page_opens_offline_and_asks_for_nothing(browser, tmp_path):
    shared = tmp_path / "shared.html"
    shared.write_text(conversation_html("Seventeen times twenty-three", conversation()), encoding="utf-8")
    context = browser.new_context()
    context.set_offline(True)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(shared.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    assert page.title() == "Seventeen times twenty-three"
    assert page.get_by_text("It is 391").is_visible()
    assert page.get_by_text("[1] notes.md · page 212").is_visible()
    assert page.locator("img").evaluate("image => image.naturalWidth") == 480  # drawn from its data: URI
    assert requests == [shared.as_uri()], requests  # the file itself, and nothing else
    assert page.evaluate("typeof window.__injected") == "undefined" and errors == []
    context.close()
