"""Driving the Chat page in Chromium (Playwright): open it on a fresh session, fix the seed, ask and wait."""

from __future__ import annotations

from typing import Any


def open_chat(browser: Any, url: str, seed: str, height: int = 900) -> Any:
    """A new page (a new session) on the Chat page once the model is loaded, with the sidebar's Seed set."""
    page = browser.new_page(viewport={"width": 1280, "height": height})
    page.goto(url)
    page.get_by_text("SmolLM2-135M-Instruct").first.wait_for(timeout=180_000)  # status line: model loaded
    field = page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Seed")
    field.fill(seed)
    field.press("Enter")
    page.wait_for_timeout(1000)  # the rerun that stores it
    return page


def ask(page: Any, text: str, answer_index: int) -> Any:
    """Send `text`; return the `answer_index`-th chat message once its metrics line says it is complete."""
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(text)
    box.press("Enter")
    answer = page.locator('[data-testid="stChatMessage"]').nth(answer_index)
    answer.get_by_text("tok/s").first.wait_for(timeout=180_000)  # a rerun may briefly show the line twice
    return answer
