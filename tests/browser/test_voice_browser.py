"""Voice input in Chromium, as a person uses it: a fake microphone (Chromium's --use-file-for-fake-audio-capture)
plays a recording; the person presses the chat input's microphone, then submits the recording; the app transcribes
it on this machine (a Whisper-shaped model: nonsense words, through the real path), shows its progress and the
words in a draft; the person corrects them and sends, and the model answers. The app's Content-Security-Policy
stays on throughout (the recorder reads its recording back from a blob: URL)."""

from __future__ import annotations

import os
import re
import time

from playwright.sync_api import expect

from tests.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.helpers import model_loaded, set_number, settle, streamlit_app
from tests.unit.test_speech import wav_bytes


def test_a_recording_from_the_microphone_is_transcribed_corrected_and_sent(browser, tiny_model_dir, tiny_whisper_dir,
                                                                          tmp_path):
    phrase = tmp_path / "phrase.wav"
    phrase.write_bytes(wav_bytes(4.0, rate=48_000))  # what the fake microphone plays, over and over
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1",
           "DEMO_DATABASE_URL": f"sqlite:///{tmp_path}/conversations.db", "DEMO_SPEECH_MODEL": str(tiny_whisper_dir)}
    with streamlit_app(env, "streamlit-voice.log") as url:
        listening = browser.browser_type.launch(executable_path=CHROMIUM, args=[
            *CHROMIUM_ARGS, "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={phrase}"])
        try:
            context = listening.new_context(viewport={"width": 1280, "height": 1000})
            context.grant_permissions(["microphone"], origin=url)
            page = context.new_page()
            refused: list[str] = []
            page.on("console", lambda message: refused.append(message.text)
                    if "Content Security Policy" in message.text else None)
            page.goto(url)
            model_loaded(page, model="tiny-model")
            set_number(page, "Max new tokens", "8")

            box = page.get_by_test_id("stChatInput")
            heard = page.get_by_text(re.compile(r"Transcribed (\d+\.\d) s with tiny-whisper on this machine"))
            for speaking_ms in (2500, 3300, 1800, 4000):
                if _heard_words(page, box, heard, speaking_ms):
                    break
            expect(heard).to_be_visible(timeout=1_000)
            seconds = float(re.search(r"(\d+\.\d) s", heard.inner_text()).group(1))
            assert 1.0 <= seconds <= 6.0, seconds  # what was recorded, not an empty or endless file
            words = page.get_by_label("Your words")
            assert words.input_value().strip()  # the model's words, ready to correct
            assert page.locator('[data-testid="stChatMessage"]').count() == 0  # nothing sent yet

            words.fill("What is the capital of France?")
            page.get_by_role("button", name="Send", exact=True).click()
            question = page.locator('[data-testid="stChatMessage"]').nth(0)
            expect(question).to_contain_text("What is the capital of France?", timeout=30_000)
            answer = page.locator('[data-testid="stChatMessage"]').nth(1)
            answer.get_by_text("tok/s").first.wait_for(timeout=60_000)
            settle(page, answer)
            expect(page.get_by_label("Your words")).to_have_count(0)
            assert refused == [], refused
        finally:
            listening.close()


def _heard_words(page, box, heard, speaking_ms: int) -> bool:
    """One take: record for `speaking_ms`, submit, and wait for its outcome. The model is random: in some takes it
    writes nothing but the end (the app says "No words were recognised in the N s recorded"), and a person speaks
    again; False then. A take's warning names its own length, so an earlier take's is not mistaken for it."""
    nothing = page.get_by_text(re.compile(r"No words were recognised in the"))
    before = nothing.all_inner_texts()
    box.get_by_role("button", name="Start recording").click()
    page.wait_for_timeout(speaking_ms)  # speaking
    box.get_by_role("button", name="Submit recording").click()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if heard.is_visible():
            return True
        if nothing.all_inner_texts() not in ([], before):
            return False
        page.wait_for_timeout(300)
    raise AssertionError("the recording was neither transcribed nor said to hold no words within 60 s")
