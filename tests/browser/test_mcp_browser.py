"""An MCP server's tool called from the Tools page in a real browser (Chromium, `streamlit run`, SmolLM2): the
demo server of tests/mcp_servers over stdio, configured in an mcp.json as an administrator would; its unannotated
tool set to run without asking in the sidebar."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from tests.browser.test_browser import ask_with_a_forced_call
from tests.helpers import ARTIFACTS, model_loaded, readme_screenshot, streamlit_app

SERVER = Path(__file__).parents[2] / "examples" / "mcp_servers" / "demo_server.py"


def test_the_model_calls_an_mcp_tool_and_answers_from_its_result(smollm2_dir, browser, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}}))
    env = {**os.environ, "DEMO_MODEL": str(smollm2_dir), "HF_HUB_OFFLINE": "1", "DEMO_MCP_CONFIG": str(config),
           "DEMO_MCP_CONNECT_TIMEOUT_S": "60"}
    with streamlit_app(env, "streamlit-mcp.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/tools")
        model_loaded(page, 120_000)
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("connected · 11 tools").wait_for(state="attached", timeout=60_000)  # in its section
        # paint says nothing about its effects, so it asks before each call: the user lets it run, for this
        # conversation, with the selector next to its switch.
        # paint(color: "red" | "green" | "blue", coats: int, note: str): the call is constrained to that schema.
        answer = ask_with_a_forced_call(page, "paint", "Paint the kitchen wall blue, with two coats.",
                                        then=lambda: choose(page, "Run policy of paint", "Run"))
        card = answer.get_by_test_id("stExpander").first
        card.click()
        card.get_by_text("coat(s) of").first.wait_for(timeout=10_000)  # the MCP server's result
        sidebar.get_by_text("MCP servers").click()  # the servers' status, for the screenshot
        sidebar.get_by_text("connected · 11 tools").wait_for(timeout=10_000)
        page.wait_for_timeout(500)
        page.mouse.move(700, 5)
        readme_screenshot(page, "mcp.png")
        page.close()


def choose(page, label: str, option: str) -> None:
    """Pick `option` in a selectbox. The sidebar may still be drawn again (a server connecting), which closes an
    open list: then open it again."""
    box = page.get_by_role("combobox", name=label)
    for _ in range(5):
        box.click()
        try:
            page.get_by_role("option", name=option, exact=True).click(timeout=5_000)
            break
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
    else:
        raise AssertionError(f"the option {option!r} never showed")
    expect(page.get_by_test_id("stSelectbox").filter(has=page.get_by_role("combobox", name=label))).to_contain_text(
        option, timeout=10_000)
    page.wait_for_timeout(1000)  # the rerun that applies it
