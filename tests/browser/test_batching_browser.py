"""Two browser tabs on one model, in Chromium: the second tab's answer streams while the first one's is still being
written (continuous batching), and the status next to the model picker says how many answers the model is writing."""

from __future__ import annotations

import time

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from tests.helpers import model_loaded, readme_screenshot

STORY = "Write a very long story about a lighthouse keeper and a storm."


def open_tab(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.goto(url)
    model_loaded(page, 120_000)
    return page


def ask(page, text: str):
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(text)
    box.press("Enter")
    return page.locator('[data-testid="stChatMessage"]').nth(1)


def wait_for_text(answer, chars: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(answer.inner_text()) < chars:
        assert time.monotonic() < deadline, "no answer streamed"
        time.sleep(0.1)


def test_a_second_tab_is_answered_while_the_first_answer_is_written(app_url, browser):
    first_tab, second_tab = open_tab(browser, app_url), open_tab(browser, app_url)
    first = ask(first_tab, STORY)
    wait_for_text(first, 60)
    second_tab.reload()  # the status is drawn now, while the first tab's answer is being written
    model_loaded(second_tab, 60_000)
    status = second_tab.get_by_role("main")  # next to the model picker, live
    expect(status).to_contain_text("The model is writing 1 answer (up to 8 answers together).", timeout=30_000)
    second = ask(second_tab, "Write a short poem about the sea.")
    wait_for_text(second, 60)
    # The first answer is not finished yet (no metrics line under it): both were being written at the same time.
    assert "tok/s" not in first.inner_text(), "the second answer waited for the first one"
    assert "Waiting" not in second.inner_text()
    readme_screenshot(second_tab, "two-tabs.png")
    # The long story need not be finished to prove the point: Stop it, and the short poem still ends on its own.
    try:
        first.get_by_role("button", name="Stop").click(timeout=5_000)
    except PlaywrightTimeoutError:  # it ended meanwhile (a loaded machine): then it has its metrics line
        first.get_by_text("tok/s").first.wait_for(timeout=30_000)
    else:
        expect(first.get_by_text("Stopped")).to_be_visible(timeout=30_000)
    second.get_by_text("tok/s").first.wait_for(timeout=180_000)
    first_tab.close()
    second_tab.close()
