"""Signing in to an MCP server from the sidebar, in a real browser (Chromium, `streamlit run`): the user adds the
protected server of tests/mcp_servers/oauth_servers.py, clicks "Sign in to protected", the authorization server
approves at once and sends the browser back to the app (DEMO_PUBLIC_URL) with code and state, and the server's
tools appear in the tab where the user clicked; Sign out forgets it again."""

from __future__ import annotations

import os
import sys

from cryptography.fernet import Fernet

from harness.local_http import free_port
from harness.processes import server_process
from tests.api.test_mcp_oauth import OAuthServers
from tests.helpers import ARTIFACTS, ROOT


def test_a_user_signs_in_to_a_server_from_the_sidebar_and_gets_its_tools(tiny_model_dir, browser, tmp_path):
    servers = OAuthServers(access_seconds=3600)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1", "DEMO_BROWSER_ALLOW": "127.0.0.1",
           "DEMO_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}", "DEMO_PUBLIC_URL": f"{url}/",
           "DEMO_SECRET_KEY": Fernet.generate_key().decode(), "DEMO_MCP_CONFIG": ""}
    command = [sys.executable, "-m", "streamlit", "run", "app/frontends/streamlit/web.py",
               "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true"]
    try:
        with server_process(command, f"{url}/_stcore/health", cwd=ROOT, env=env,
                            log=ARTIFACTS / "streamlit-mcp-oauth.log", start_timeout_s=60):
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{url}/tools")
            sidebar = page.get_by_test_id("stSidebar")
            sidebar.get_by_text("MCP servers").first.click(timeout=120_000)
            sidebar.get_by_label("Server name").fill("protected")
            sidebar.get_by_label("URL (Streamable HTTP)").fill(servers.mcp_url)
            sidebar.get_by_role("button", name="Add server").click()
            sign_in = sidebar.get_by_role("link", name="Sign in to protected")
            sign_in.wait_for(timeout=60_000)
            assert sign_in.get_attribute("href").startswith(f"http://127.0.0.1:{servers.as_port}/authorize?")

            with page.context.expect_page(timeout=30_000) as opened:
                sign_in.click()
            back = opened.value  # the authorization server approved and sent this tab back to the app
            back.get_by_text("Signed in to protected").wait_for(timeout=60_000)
            assert back.url.split("?")[0].rstrip("/") == url  # the code and state left the URL

            # The first tab notices by itself (it looks every 2 s while a sign-in is in progress).
            sidebar.get_by_text("connected · 2 tools").wait_for(state="attached", timeout=30_000)  # in its section
            sidebar.get_by_role("switch", name="whoami").wait_for(state="attached", timeout=30_000)  # a tool toggle
            assert sidebar.get_by_role("link", name="Sign in to protected").count() == 0
            page.screenshot(path=str(ARTIFACTS / "mcp-oauth.png"))
            back.close()

            # Signing out forgets the sign-in: the tools go, and the server asks again.
            sidebar.get_by_text("MCP servers").first.click()
            sidebar.get_by_role("button", name="Sign out").click()
            sidebar.get_by_role("link", name="Sign in to protected", include_hidden=True).first.wait_for(
                state="attached", timeout=60_000)
            sidebar.get_by_role("switch", name="whoami").wait_for(state="detached", timeout=30_000)
            page.close()
    finally:
        servers.stop()
