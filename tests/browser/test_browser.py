"""The real thing: `streamlit run` on 127.0.0.1, Debian's headless Chromium driven by Playwright, SmolLM2."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.helpers import (
    ARTIFACTS,
    choose,
    generation_settings,
    model_loaded,
    readme_screenshot,
    settle,
    stop_and_check,
)


def assistant_texts(page):
    return page.locator('[data-testid="stChatMessage"]').all_inner_texts()


def test_chat_streams_an_answer_and_can_be_stopped(app_url, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.goto(app_url)
    model_loaded(page, 120_000)  # status line: model loaded
    box = page.get_by_test_id("stChatInputTextArea")

    # Greedy, so the answer is the model's best one.
    generation_settings(page).get_by_role("slider").first.focus()
    page.keyboard.press("Home")
    box.fill("What is the capital of France? Answer in one sentence.")
    box.press("Enter")
    answer = page.locator('[data-testid="stChatMessage"]').nth(1)
    answer.get_by_text("tok/s").first.wait_for(timeout=120_000)
    assert "Paris" in answer.inner_text()
    page.screenshot(path=str(ARTIFACTS / "chat.png"), full_page=False)

    # A long answer, stopped while it streams: the partial answer stays, marked Stopped with its metrics at once
    # (the Stop button's click reruns the page; no other interaction is needed).
    settle(page, answer)
    box.fill("Write a very long story about a dragon who learns to cook.")
    box.press("Enter")
    story = page.locator('[data-testid="stChatMessage"]').nth(3)
    # The status next to the model picker is live: it says the model is writing while this answer streams.
    expect(page.locator(".st-key-model_picker_row")).to_contain_text("The model is writing 1 answer",
                                                                      timeout=30_000)
    stop_and_check(page, story)
    page.screenshot(path=str(ARTIFACTS / "chat-stopped.png"), full_page=False)

    # Regenerate has the same Stop, and the stopped answer is a second version next to the first.
    settle(page, story)
    story.get_by_role("button", name="Regenerate").click()
    story = page.locator('[data-testid="stChatMessage"]').nth(3)
    stop_and_check(page, story)
    expect(story).to_contain_text("2/2", timeout=10_000)
    page.close()


def ask_with_a_forced_call(page, tool: str, question: str, then=None):
    """On a Tools page: greedy, `tool` forced, then the sidebar step `then` if any (the last before sending, so no
    other change can race its rerun), and `question` sent once the page is idle; the answer's bubble once the
    call's card and the answer after it are finished and the page has redrawn."""
    sidebar = page.get_by_test_id("stSidebar")
    generation_settings(page).get_by_role("slider").first.focus()
    page.keyboard.press("Home")  # temperature 0: greedy
    choose(page, sidebar.get_by_test_id("stSelectbox").filter(has_text="Tool choice"), tool)
    if then is not None:
        then()
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=30_000)  # every change applied
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(question)
    box.press("Enter")
    answer = page.locator('[data-testid="stChatMessage"]').nth(1)
    answer.get_by_text(f"{tool} →").wait_for(timeout=180_000)  # the finished card's label
    answer.get_by_text("tok/s").nth(1).wait_for(timeout=120_000)  # the answer after the call
    # The page redraws once after the turn, which would close a card opened before it (seen on a loaded machine).
    page.wait_for_timeout(1500)
    page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=30_000)
    return answer


def test_tools_page_shows_a_tool_call_card_and_the_answer(app_url, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{app_url}/tools")
    model_loaded(page, 120_000)
    answer = ask_with_a_forced_call(page, "calculator", "What is 17 * 23?")
    card = answer.get_by_test_id("stExpander").first
    assert "calculator → 17 * 23 = 391" in card.inner_text()  # the result, in sight while the card is closed
    card.click()  # open the card: arguments and result
    card.get_by_text("17 * 23 = 391", exact=True).wait_for(timeout=10_000)
    assert "391" in answer.inner_text() and "<tool_call>" not in answer.inner_text()
    readme_screenshot(page, "tools.png")
    page.close()


@pytest.fixture(scope="module")
def site():
    from harness.local_http import serve
    from tests.helpers import ARTICLE, html

    with serve({"/article": html(ARTICLE)}) as base:
        yield base


def open_all_tools(browser, app_url, tool):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{app_url}/all_tools")
    model_loaded(page, 120_000)
    sidebar = page.get_by_test_id("stSidebar")
    generation_settings(page).get_by_role("slider").first.focus()
    page.keyboard.press("Home")  # temperature 0: greedy
    choose(page, sidebar.get_by_test_id("stSelectbox").filter(has_text="Tool choice"), tool)
    return page


def send(page, text, files=()):
    from playwright.sync_api import expect

    if files:
        page.locator('[data-testid="stChatInput"] input[type="file"]').set_input_files(list(files))
        page.get_by_text(files[0]["name"]).first.wait_for(timeout=10_000)
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill(text)
    # Send only once the files are uploaded (the button waits for them): on a loaded machine Enter came first and
    # the message went out without its picture.
    expect(page.get_by_test_id("stChatInputSubmitButton")).to_be_enabled(timeout=60_000)
    box.press("Enter")
    return page.locator('[data-testid="stChatMessage"]').nth(1)


def test_all_tools_the_model_runs_python_and_a_plot_appears(app_url, browser):
    page = open_all_tools(browser, app_url, "python")
    answer = send(page, "Plot [3, 1, 4, 1, 5, 9, 2, 6] with matplotlib.")
    # While the model writes the call, its program shows as it grows (then the call's card takes its place).
    answer.get_by_text("Writing a call to python...").wait_for(timeout=120_000)
    answer.get_by_text("import").first.wait_for(timeout=60_000)
    assert answer.get_by_text("waiting for the model...").count() == 0
    page.mouse.move(700, 5)  # no tooltip in the screenshot
    readme_screenshot(page, "all-tools-writing.png")
    answer.get_by_test_id("stImage").first.wait_for(timeout=180_000)
    assert answer.get_by_text("Writing a call to python...").count() == 0
    answer.get_by_text("python →").wait_for(timeout=10_000)
    answer.get_by_text("tok/s").nth(1).wait_for(timeout=120_000)
    page.mouse.move(700, 5)  # no tooltip in the screenshot
    # The page redraws once after the turn: until it has, the old card and the new one may both be there.
    expect(answer.get_by_test_id("stExpander")).to_have_count(1, timeout=30_000)
    expect(answer.get_by_test_id("stImage")).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(500)
    readme_screenshot(page, "all-tools.png")
    page.close()


def test_all_tools_an_uploaded_csv_is_analysed_with_python(app_url, browser):
    page = open_all_tools(browser, app_url, "python")
    csv = {"name": "prices.csv", "mimeType": "text/csv", "buffer": b"city,price\nParis,12.5\nBerlin,7.5\nRome,10\n"}
    answer = send(page, "Read prices.csv with pandas and print the average price.", [csv])
    page.locator('[data-testid="stChatMessage"]').first.get_by_text("prices.csv (40 characters)").wait_for(
        timeout=30_000)  # the document, shown with the user's message
    answer.get_by_text("python →").wait_for(timeout=180_000)
    card = answer.get_by_test_id("stExpander").first
    card.click()
    card.get_by_text("pandas").first.wait_for(timeout=10_000)
    card.get_by_text("10.1").first.wait_for(timeout=10_000)  # the mean price, printed by the kernel
    page.close()


def test_all_tools_a_local_page_is_opened_and_cited(app_url, browser, site):
    page = open_all_tools(browser, app_url, "open_url")
    answer = send(page, f"Read the page {site}/article")
    answer.get_by_text("open_url →").wait_for(timeout=180_000)
    answer.get_by_text("tok/s").nth(1).wait_for(timeout=120_000)
    link = answer.locator(f'a[href="{site}/article"]').first
    link.wait_for(timeout=10_000)
    assert "Lighthouses of Brittany" in link.inner_text()
    page.close()


def sunset_png() -> bytes:
    """A small picture drawn in code: a sun over the sea."""
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (480, 300), (255, 183, 94))
    draw = ImageDraw.Draw(image)
    draw.ellipse((180, 90, 300, 210), fill=(255, 236, 140))
    draw.rectangle((0, 170, 480, 300), fill=(38, 84, 140))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_chat_a_picture_to_a_text_only_model_is_shown_refused_clearly_and_its_text_answered(app_url, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app_url)
    model_loaded(page, 120_000)
    page.get_by_text("Text only: cannot see images").wait_for(timeout=10_000)
    picture = {"name": "sunset.png", "mimeType": "image/png", "buffer": sunset_png()}
    answer = send(page, "What is in this picture? Where could it be?", [picture])
    question = page.locator('[data-testid="stChatMessage"]').first
    question.get_by_test_id("stImage").wait_for(timeout=60_000)  # the picture, in the user's message
    answer.get_by_text("This model cannot see images").first.wait_for(timeout=60_000)  # a rerun may show it twice
    button = page.get_by_role("button", name="Answer the text only")
    button.wait_for(timeout=30_000)
    page.mouse.move(700, 5)
    page.screenshot(path=str(ARTIFACTS / "vision-refused.png"), full_page=False)
    button.click()
    answer.get_by_text("tok/s").first.wait_for(timeout=120_000)
    assert answer.get_by_text("This model cannot see images").count() == 0
    assert question.get_by_test_id("stImage").count() == 1  # the picture stays in the conversation
    page.close()
