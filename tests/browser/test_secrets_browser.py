"""A key from the server's environment never reaches a browser (`streamlit run` driven by Chromium, every websocket
frame recorded): the OpenAI-compatible backend set up by DEMO_API_KEY answers with it, while no frame on the Chat,
Tools or Compare page carries it, and a URL typed in its place gets no key the user did not type."""

from __future__ import annotations

import os

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import serving
from tests.helpers import MAIN, settle, streamlit_app

CANARY = "sk-canary-4f1c0de5ecre7"


@pytest.fixture(scope="module")
def keyed_api(tiny_model_dir):
    """Our OpenAI-compatible server on 127.0.0.1, which answers only requests that carry CANARY."""
    engine = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device="cpu"))
    with serving(create_app(ServerSettings(api_key=CANARY), client=engine)) as base:
        yield f"{base}/v1"


def env_for(base_url: str) -> dict[str, str]:
    return {"DEMO_BACKEND": "openai", "DEMO_API_BASE_URL": base_url, "DEMO_API_KEY": CANARY,
            "DEMO_API_MODEL": "", "HF_HUB_OFFLINE": "1"}


def test_no_frame_carries_the_servers_key_and_the_answer_still_uses_it(keyed_api, browser, tmp_path):
    env = {**os.environ, **env_for(keyed_api), "DEMO_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"}
    frames: list[str] = []
    with streamlit_app(env, "streamlit-secrets.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("websocket", lambda ws: (
            ws.on("framereceived", lambda payload: frames.append(_text(payload))),
            ws.on("framesent", lambda payload: frames.append(_text(payload)))))
        page.goto(url)
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill("Hello there")
        box.press("Enter")
        answer = page.get_by_test_id("stChatMessage").nth(1)
        answer.get_by_text("tok/s").first.wait_for(timeout=120_000)  # the server took the key: it answered
        settle(page, page.get_by_role("main"))
        for path in ("tools", "compare"):
            page.goto(f"{url}/{path}")
            settle(page, page.get_by_role("main"))
        page.close()
    assert len(frames) > 20
    assert not [frame for frame in frames if CANARY in frame]


def _text(payload: str | bytes) -> str:
    return payload if isinstance(payload, str) else payload.decode("latin-1")


def test_the_servers_key_goes_only_to_the_url_it_was_set_for(keyed_api, monkeypatch, database):
    """The sidebar's key field is empty; the key is used for DEMO_API_BASE_URL, and not for a URL the visitor
    types instead (it could be a server of theirs, collecting it). While the app listens on every interface, such a
    URL on this machine is refused outright: a visitor elsewhere could reach this machine's ports with it."""
    for name, value in env_for(keyed_api).items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    assert not at.exception
    assert at.text_input(key="settings.model.api_key").value == ""
    assert all(CANARY not in str(widget.value) for widget in at.text_input)
    assert not at.error  # connected with the server's key

    elsewhere = keyed_api.replace("127.0.0.1", "localhost")  # another URL (here the same server: it says 401)
    at.text_input(key="settings.model.api_base_url").set_value(elsewhere).run()
    # The app listens on 127.0.0.1 only (.streamlit/config.toml, `make run`): the URL is tried, without the key.
    assert any("refused the API key (401)" in error.value for error in at.error), [e.value for e in at.error]

    monkeypatch.setattr(st_config, "get_option", lambda name, real=st_config.get_option:
                        "0.0.0.0" if name == "server.address" else real(name))
    at.run()  # served to the network: a URL on this machine is not connected to at all
    assert any("reachable from other machines" in error.value for error in at.error), [e.value for e in at.error]
