"""The Models page in Chromium, as a user meets it: `make run` with DEMO_ALLOW_DOWNLOADS=1 and HF_ENDPOINT at a local
double of the Hugging Face Hub (127.0.0.1). Search, open a repository, download: the bar moves with speed and time
left, survives a page refresh, cancels, continues from where it stopped, and the model is then used for chat."""

from __future__ import annotations

import os
import re

from playwright.sync_api import expect

from tests.helpers import open_popover, readme_screenshot, streamlit_app
from tests.hub_double import HubDouble, HubRepo, hub_env
from tests.model_fixtures import write_gguf

REPO = "acme/Tiny-Chat-GGUF"
SIZE = 6_000_000


def test_a_download_survives_a_refresh_cancels_continues_and_is_used(browser, tmp_path):
    gguf = write_gguf(tmp_path / "made" / "tiny.gguf", name="Tiny Chat").read_bytes()
    double = HubDouble()
    double.add(HubRepo(REPO, {"tiny-chat-Q4_K_M.gguf": gguf + b"\0" * (SIZE - len(gguf)),
                              "README.md": b"---\nlicense: apache-2.0\n---\n"},
                       card_data={"license": "apache-2.0"}, tags=("gguf",), pipeline_tag="text-generation",
                       downloads=1234))
    # A minute for the whole file: time to look, refresh and cancel on a loaded machine (the throttle is lifted
    # before Continue, so the test is no slower for it).
    double.bytes_per_second = 100_000
    with double.serve() as hub_url:
        env = {**os.environ, **hub_env(hub_url, tmp_path / "hf"), "DEMO_ALLOW_DOWNLOADS": "1"}
        with streamlit_app(env, "streamlit-models.log") as url:
            page = browser.new_page(viewport={"width": 1280, "height": 1300})
            page.goto(f"{url}/models")
            page.get_by_role("tab", name="Search the Hub").click(timeout=60_000)
            expect(page.get_by_text(re.compile(r"contact .*127\.0\.0\.1"))).to_be_visible(timeout=30_000)
            search = page.get_by_label("Search the Hub by name")
            search.fill("tiny-chat")
            search.press("Enter")
            expect(page.get_by_text("1,234 downloads")).to_be_visible(timeout=30_000)
            result = page.locator("div").filter(has_text="1,234 downloads").filter(
                has=page.get_by_role("button", name="Open")).last
            result.get_by_role("button", name="Open").click()
            repository = page.locator(".st-key-models_repository")
            expect(repository).to_contain_text("tiny-chat-Q4_K_M.gguf", timeout=30_000)
            expect(repository).to_contain_text("Licence: apache-2.0")
            repository.get_by_role("button", name="Download").click()

            downloads = page.get_by_test_id("stProgress").first
            expect(downloads).to_contain_text(re.compile(r"Downloading: .* of 6 MB · .*/s · .* left"),
                                              timeout=30_000)
            page.get_by_role("heading", name="Models").scroll_into_view_if_needed()
            readme_screenshot(page, "models-page.png")
            page.reload()  # a refresh: the download goes on, and the page finds it
            expect(page.get_by_test_id("stProgress").first).to_contain_text("Downloading:", timeout=60_000)
            page.get_by_role("button", name="Cancel").click()
            expect(page.get_by_test_id("stProgress").first).to_contain_text("Cancelled at", timeout=30_000)
            cancelled_at = double.requested("GET", "tiny-chat-Q4_K_M.gguf")
            double.bytes_per_second = None
            page.get_by_role("button", name="Continue").click()
            expect(page.get_by_test_id("stProgress").first).to_contain_text("Done: 6 MB of 6 MB",
                                                                              timeout=60_000)
            resumed = [rng for _, _, rng in double.requested("GET", "tiny-chat-Q4_K_M.gguf")[len(cancelled_at):]]
            assert resumed and resumed[0] and not resumed[0].startswith("bytes=0-"), resumed

            page.get_by_role("button", name="Use for chat").click()
            expect(page.get_by_text("The picker now loads")).to_be_visible(timeout=30_000)
            popover = open_popover(page, page.locator(".st-key-model_picker button").first,
                                   page.get_by_test_id("stPopoverBody"))
            expect(popover.get_by_role("combobox", name="Backend")).to_have_value("llama.cpp (GGUF)")
            expect(popover.get_by_role("textbox", name="Model path")).to_have_value(
                re.compile(r"models--acme--Tiny-Chat-GGUF/snapshots/[0-9a-f]{40}/tiny-chat-Q4_K_M\.gguf$"))
            page.close()
