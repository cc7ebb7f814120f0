"""The model library in Chromium, as a user meets it: `make run` on the embedded SmolLM2 (transformers), with a
GGUF in a folder named by DEMO_MODEL_DIRS. The picker lists it; picking it shows what it is and that it fits,
switches to llama.cpp, loads it, and it answers."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from app.clients.embedded_model import gguf_path
from tests.helpers import ask, model_loaded, open_popover, readme_screenshot, require_llama_cpp, streamlit_app

pytestmark = pytest.mark.llamacpp


def test_a_gguf_found_on_this_machine_is_picked_loaded_and_answers(smollm2_dir, browser, tmp_path):
    require_llama_cpp()
    folder = tmp_path / "library" / "someone" / "SmolLM2-GGUF"
    folder.mkdir(parents=True)
    shutil.copy(gguf_path(), folder / "SmolLM2-copy-Q4_1.gguf")  # a model of its own, not the embedded file
    env = {**os.environ, "DEMO_MODEL": str(smollm2_dir), "DEMO_BACKEND": "hf", "HF_HUB_OFFLINE": "1",
           "DEMO_MODEL_DIRS": str(tmp_path / "library")}
    with streamlit_app(env, "streamlit-model-library.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(url)
        model_loaded(page)
        found = open_popover(page, page.locator(".st-key-model_picker button").first,
                             page.get_by_test_id("stSelectbox").filter(has_text="On this machine"))
        found.get_by_role("combobox").click()
        page.get_by_role("option").filter(has_text=str(tmp_path / "library")).filter(
            has_text=re.compile(r"^Smollm2 .* · GGUF Q4_1 · 98 MB · ")).click()
        # Before it loads: what it is, and that it fits.
        popover = page.get_by_test_id("stPopoverBody")
        expect(popover).to_contain_text("GGUF Q4_1 · 135M parameters · context 8,192 · plain chat · "
                                        "licence apache-2.0", timeout=30_000)
        expect(popover).to_contain_text(re.compile(r"About \d+ MB of RAM: .* It fits in the .* free now"))
        expect(popover.get_by_role("combobox", name="Backend")).to_have_value("llama.cpp (GGUF)")  # GGUF's engine
        readme_screenshot(page, "model-library.png")
        page.keyboard.press("Escape")
        model_loaded(page, model="SmolLM2-copy-Q4_1.gguf")  # on llama.cpp, from the copy
        answer = ask(page, "What is the capital of France?", 1)
        text = answer.inner_text()
        assert "tok/s" in text and len(text.split("tok/s")[0].strip()) > 10, text
        page.close()
