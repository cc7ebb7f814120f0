"""The app as `make run` serves it (`streamlit run app/frontends/streamlit/web.py`) sends a Content-Security-Policy,
works under it in Chromium (a message is answered, no violation by the app's own code), and the browser refuses a remote
image that got into the page anyway: the second line behind the markdown sanitiser."""

from __future__ import annotations

import os

from app.frontends.streamlit.csp import HEADER
from tests.browser.test_remote_images_browser import listener
from tests.helpers import generation_settings, streamlit_app


def test_the_served_app_forbids_remote_loads_and_still_works(tiny_model_dir, browser):
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1"}
    with listener() as (base, requests), streamlit_app(env, "streamlit-csp.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        violations: list[str] = []
        page.on("console", lambda message: violations.append(message.text)
                if "Content Security Policy" in message.text else None)
        response = page.goto(url)
        assert response is not None
        policy = response.headers.get(HEADER.lower(), "")
        assert "img-src 'self' data: blob:" in policy and "default-src 'self'" in policy

        box = page.get_by_test_id("stChatInputTextArea")
        box.wait_for(timeout=120_000)
        tokens = generation_settings(page).get_by_role("spinbutton", name="Max new tokens")
        tokens.fill("8")
        tokens.press("Enter")
        page.wait_for_timeout(1000)
        box.fill("Hello")
        box.press("Enter")
        page.locator('[data-testid="stChatMessage"]').nth(1).get_by_text("tok/s").first.wait_for(timeout=120_000)
        assert violations == [], f"the app's own code breaks the policy: {violations}"

        # Whatever ends up in the page, the browser itself does not fetch it.
        page.evaluate("""base => {
            const image = document.createElement("img");
            image.src = base + "/injected-image";
            document.body.appendChild(image);
            const style = document.createElement("div");
            style.style.backgroundImage = `url(${base}/injected-css)`;
            document.body.appendChild(style);
        }""", base)
        page.wait_for_timeout(1500)
        page.close()
        assert requests == []
        assert any("injected-image" in text for text in violations)
