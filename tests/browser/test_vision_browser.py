"""A picture attached in a real browser (Chromium) reaches a vision-language model (the tiny SmolVLM-shaped one,
tests/tiny_vlm.py) under `streamlit run`, and shows in the chat."""

from __future__ import annotations

import os

import pytest

from tests.browser.test_browser import send, sunset_png
from tests.helpers import ARTIFACTS, model_loaded, readme_screenshot, streamlit_app


@pytest.fixture(scope="module")
def vlm_app_url(tiny_vlm_dir, browser):
    env = {**os.environ, "DEMO_MODEL": str(tiny_vlm_dir), "HF_HUB_OFFLINE": "1"}
    with streamlit_app(env, "streamlit-vision.log") as url:
        yield url


def test_a_picture_is_shown_in_the_chat_and_the_vision_model_answers(vlm_app_url, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(vlm_app_url)
    model_loaded(page, timeout=120_000, model="tiny-vlm")  # not "Loading tiny-vlm...", drawn before it is loaded
    page.get_by_text("Sees images").wait_for(timeout=10_000)
    picture = {"name": "sunset.png", "mimeType": "image/png", "buffer": sunset_png()}
    answer = send(page, "What is in this picture?", [picture])
    question = page.locator('[data-testid="stChatMessage"]').first
    image = question.get_by_test_id("stImage")
    image.wait_for(timeout=30_000)
    assert "sunset.png" in question.inner_text()  # its caption
    answer.get_by_text("tok/s").first.wait_for(timeout=120_000)
    assert answer.get_by_test_id("stAlert").count() == 0  # an answer, not an error
    assert image.locator("img").evaluate("img => img.naturalWidth") == 480
    readme_screenshot(page, "vision.png")
    page.close()
