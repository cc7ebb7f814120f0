"""Chatting with a long document in Chromium, as a user does: `make run` on the embedded SmolLM2, a 300-page PDF
attached to a Chat message and a question about page 212. The page says the document is searched, the question
goes out with the passages that answer it, the answer comes, and its sources open on page 212; a follow-up question
without the file searches it again. Then a refresh: the conversation comes back with its sources. A collection is
filled, searched and re-indexed on the Knowledge page, answers on the Chat page, and gives both Compare targets the
same passages."""

from __future__ import annotations

import re

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.helpers import end_answer, model_loaded, readme_screenshot
from tests.knowledge_fixtures import FACTS, long_pdf_bytes


def test_a_long_pdf_is_searched_for_each_question_and_its_sources_open(app_url, browser, tmp_path):
    pdf = tmp_path / "local-history.pdf"
    pdf.write_bytes(long_pdf_bytes())
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(app_url)
    model_loaded(page, 120_000)
    page.locator('[data-testid="stChatInput"] input[type="file"]').set_input_files(str(pdf))
    page.get_by_text("local-history.pdf").first.wait_for(timeout=10_000)
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(FACTS[212][1])
    expect(page.get_by_test_id("stChatInputSubmitButton")).to_be_enabled(timeout=60_000)
    box.press("Enter")

    question = page.locator('[data-testid="stChatMessage"]').nth(0)
    expect(question).to_contain_text(re.compile(r"local-history\.pdf · too long to read whole .* searched for each "
                                                r"question"), timeout=120_000)
    sources = question.get_by_test_id("stExpander").filter(has_text="Sources")
    expect(sources).to_contain_text(re.compile(r"passages? from local-history\.pdf"), timeout=60_000)
    answer = page.locator('[data-testid="stChatMessage"]').nth(1)
    end_answer(page, answer)  # once it has written a little: enough of the 135M model's answer
    sources.locator("summary").click()
    expect(sources).to_contain_text("[1] local-history.pdf · page 212")
    expect(sources).to_contain_text("eleven shillings")
    page.mouse.move(700, 5)
    readme_screenshot(page, "knowledge-chat.png")

    # A follow-up without the file: the same document is searched for it.
    box.fill(FACTS[37][1])
    box.press("Enter")
    follow_up = page.locator('[data-testid="stChatMessage"]').nth(2)
    follow_sources = follow_up.get_by_test_id("stExpander").filter(has_text="Sources")
    expect(follow_sources).to_contain_text(re.compile(r"passages? from local-history\.pdf"), timeout=120_000)
    follow_answer = page.locator('[data-testid="stChatMessage"]').nth(3)
    end_answer(page, follow_answer)
    follow_sources.locator("summary").click()
    expect(follow_sources).to_contain_text("[1] local-history.pdf · page 37")

    page.reload()  # the saved conversation comes back with what each question was answered from
    model_loaded(page, 120_000)
    restored = page.locator('[data-testid="stChatMessage"]').nth(2).get_by_test_id("stExpander").filter(
        has_text="Sources")
    restored.locator("summary").click(timeout=60_000)
    expect(restored).to_contain_text("[1] local-history.pdf · page 37")
    page.close()


def test_a_collection_is_filled_on_the_knowledge_page_and_answers_on_the_chat_page(app_url, browser, tmp_path):
    pdf = tmp_path / "parish-records.pdf"
    pdf.write_bytes(long_pdf_bytes())
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"{app_url}/knowledge")
    page.get_by_role("button", name="New collection").click(timeout=60_000)
    page.get_by_label("Name").fill("Parish records")
    page.get_by_label("Name").press("Enter")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_text("Made the collection Parish records")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("No documents in it yet.")).to_be_visible(timeout=30_000)  # the new collection drawn
    attach(page, pdf)
    page.get_by_role("button", name="Add", exact=True).click()
    expect(page.get_by_text("Added 1 document to Parish records.")).to_be_visible(timeout=120_000)
    expect(page.locator(".st-key-knowledge_collection")).to_contain_text(
        re.compile(r"Parish records · 1 document · \d{3},?\d* passages"))
    expect(page.get_by_test_id("stDataFrame")).to_be_visible()
    search = page.get_by_label("Try a search")
    search.fill(FACTS[158][1])
    search.press("Enter")
    expect(page.get_by_text("[1] parish-records.pdf · page 158")).to_be_visible(timeout=30_000)
    page.mouse.move(700, 5)
    readme_screenshot(page, "knowledge-page.png")
    page.get_by_role("button", name="Re-index").click()  # read again from its kept file, with its progress
    expect(page.get_by_text(re.compile(r"Read 1 of 1 documents of Parish records again: \d{3},?\d* passages in it "
                                       r"now"))).to_be_visible(timeout=120_000)

    page.goto(app_url)  # the Chat page: choose the collection, ask
    model_loaded(page, 120_000)
    ask_from(page, "Parish records", FACTS[299][1])
    question = page.locator('[data-testid="stChatMessage"]').nth(0)
    expect(question).to_contain_text("Parish records", timeout=60_000)
    sources = question.get_by_test_id("stExpander").filter(has_text="Sources")
    expect(sources).to_contain_text(re.compile(r"passages? from parish-records\.pdf"), timeout=60_000)
    end_answer(page, page.locator('[data-testid="stChatMessage"]').nth(1))
    sources.locator("summary").click()
    expect(sources).to_contain_text("[1] parish-records.pdf · page 299")

    page.goto(f"{app_url}/compare")  # both targets answer from the same passages, searched once
    ask_from(page, "Parish records", FACTS[158][1])
    cited = page.locator('[data-testid="stChatMessage"]').get_by_test_id("stExpander").filter(has_text="Sources")
    expect(cited).to_have_count(2, timeout=120_000)
    for pane in range(2):
        cited.nth(pane).locator("summary").click()
        expect(cited.nth(pane)).to_contain_text("[1] parish-records.pdf · page 158")
    page.close()


def ask_from(page, collection: str, question: str) -> None:
    """Choose the collection under the sidebar's Search my knowledge (Chat or Compare), then send the question."""
    chooser = page.get_by_test_id("stSidebar").get_by_test_id("stMultiSelect").filter(
        has_text="Search my knowledge")
    chooser.click(timeout=60_000)
    page.get_by_role("option", name=collection).click()
    page.keyboard.press("Escape")
    box = page.get_by_test_id("stChatInputTextArea")
    expect(box).to_be_enabled(timeout=120_000)
    box.fill(question)
    box.press("Enter")


def attach(page, path) -> None:
    """Put a file in the page's uploader. A run of the page that was still drawing can replace the uploader just
    after the file went in (CI saw the file vanish): then it is put in again, as a person would. While a run draws
    the page, the old uploader and the new one can both be there for a moment: the file waits for one."""
    uploader = page.locator('[data-testid="stFileUploader"] input[type="file"]')
    for _ in range(3):
        expect(uploader).to_have_count(1, timeout=30_000)  # not while a run draws a second one over the first
        uploader.set_input_files(str(path))
        try:
            page.get_by_text(path.name).first.wait_for(timeout=10_000)
            return
        except PlaywrightTimeout:  # the uploader was replaced under it: again
            continue
    raise AssertionError(f"{path.name} did not appear in the uploader")
