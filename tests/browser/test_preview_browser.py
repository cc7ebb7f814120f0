"""Previews of an answer's HTML, SVG and Mermaid in Chromium, from a conversation file a person was sent (the
answer could as well be a model's, steered by a web page). A page and a picture are drawn without their scripts;
with the page's scripts turned on, every escape they try (the app's DOM through parent and top, the app's cookie,
storage, fetch, a script from the app, a picture from elsewhere, navigating the app away, WebRTC, also through a
fresh frame) fails, with no request and no packet leaving the browser. The Mermaid diagram is drawn by the library
the app serves itself. The preview page opened as a page of its own draws nothing."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import expect

from app.config import mermaid_script
from app.frontends.streamlit.previews.route import PATH
from tests.browser.test_remote_images_browser import listener
from tests.helpers import settle, streamlit_app

# Each escape writes what happened into the frame's own page, so the test sees that the script did run.
_PROBES = """
function note(name, outcome) {
  var line = document.createElement("li"); line.id = name; line.textContent = name + ": " + outcome;
  document.getElementById("out").appendChild(line);
}
function attempt(name, escape) {
  try { note(name, "reached " + escape()); } catch (error) { note(name, "blocked"); }
}
function call(peer) {
  peer.createDataChannel("x");
  peer.createOffer().then(function (offer) { return peer.setLocalDescription(offer); });
  return "a peer";
}
attempt("parent", function () { parent.document.body.innerHTML = "PW" + "NED"; return "the parent"; });
attempt("top", function () { top.document.title = "PW" + "NED"; return "the top"; });
attempt("cookie", function () { return "[" + document.cookie + "]"; });
attempt("storage", function () { localStorage.setItem("x", "1"); return "storage"; });
attempt("webrtc", function () { return call(new RTCPeerConnection({iceServers: [{urls: "stun:STUN"}]})); });
attempt("webrtc_frame", function () {
  var frame = document.createElement("iframe"); document.body.appendChild(frame);
  return call(new frame.contentWindow.RTCPeerConnection({iceServers: [{urls: "stun:STUN"}]}));
});
try { top.location.href = "LEAK/top"; } catch (error) {}
new Image().src = "LEAK/image";
var tag = document.createElement("script"); tag.src = "/preview-probe.js"; document.head.appendChild(tag);
fetch("LEAK/fetch").then(function () { note("fetch", "reached"); }, function () { note("fetch", "blocked"); });
fetch("/_stcore/health").then(function () { note("app", "reached"); }, function () { note("app", "blocked"); });
"""
BLOCKED = {name: "blocked" for name in ("parent", "top", "cookie", "storage", "webrtc", "webrtc_frame", "fetch", "app")}


def _probes(leak: str, stun: str) -> str:
    return _PROBES.replace("LEAK", leak).replace("STUN", stun)


def _hostile_html(leak: str, stun: str) -> str:
    return ("<!doctype html><html><head><title>Hostile</title></head><body><h1>A page</h1><ul id=\"out\"></ul>"
            f"<script>{_probes(leak, stun)}</script></body></html>")


def _hostile_svg(leak: str, stun: str) -> str:
    script = _probes(leak, stun).replace('document.createElement("li")',
                                         'document.createElementNS("http://www.w3.org/2000/svg", "text")')
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="200" height="80"><g id="out"></g>'
            f'<circle cx="40" cy="40" r="30" fill="teal"/><script>//<![CDATA[\n{script}\n//]]></script></svg>')


def _conversation(leak: str, stun: str) -> dict:
    answer = ("Here is the page:\n\n```html\n" + _hostile_html(leak, stun) + "\n```\n\nA picture:\n\n```svg\n"
              + _hostile_svg(leak, stun) + "\n```\n\nAnd the flow:\n\n```mermaid\ngraph TD\n  A[Start here] --> "
              "B[Then finish]\n```\n")
    return {"format": "composite-demo-conversation", "version": 2, "title": "A page to preview", "page": "chat",
            "messages": [{"role": "user", "content": "Make me a page, a picture and a diagram."},
                         {"role": "assistant", "content": answer}]}


def _outcomes(frame) -> dict[str, str]:
    expect(frame.locator("#fetch")).to_have_count(1, timeout=15_000)
    expect(frame.locator("#app")).to_have_count(1, timeout=15_000)
    lines = frame.locator("#out > *").all_text_contents()
    return dict(line.split(": ", 1) for line in lines)


def test_previews_draw_and_every_escape_of_a_hostile_answer_fails(tiny_model_dir, browser, tmp_path):
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1",
           "DEMO_DATABASE_URL": f"sqlite:///{tmp_path}/conversations.db"}
    stun = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # where WebRTC would send its first packet
    stun.bind(("127.0.0.1", 0))
    stun.setblocking(False)
    with listener() as (leak, leaked), streamlit_app(env, "streamlit-preview.log") as url, stun:
        shared = tmp_path / "shared.json"
        shared.write_text(json.dumps(_conversation(leak, f"127.0.0.1:{stun.getsockname()[1]}")))
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        context.add_cookies([{"name": "session_secret", "value": "s3cret", "url": url}])
        page = context.new_page()
        answered: list[str] = []  # Chromium reports a request it then refuses (CSP) too: count those that went out
        page.on("requestfinished", lambda request: answered.append(request.url))
        page.goto(url)
        page.get_by_test_id("stChatInputTextArea").wait_for(timeout=120_000)
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("Import a conversation", exact=True).click()
        sidebar.locator('input[type="file"]').set_input_files(str(shared))
        answer = page.locator('[data-testid="stChatMessage"]').nth(1)
        expect(answer).to_contain_text("Here is the page", timeout=30_000)
        settle(page, page.get_by_role("main"))
        answer.get_by_role("button", name="Preview").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_role("tab")).to_have_count(3, timeout=30_000)

        frames = dialog.frame_locator("iframe")
        page_frame = frames.nth(0).frame_locator("iframe")
        expect(page_frame.get_by_role("heading", name="A page")).to_be_visible(timeout=15_000)
        page.wait_for_timeout(1000)
        assert page_frame.locator("#out > *").count() == 0  # drawn without its scripts
        dialog.get_by_text("Run the page's scripts").click()
        assert _outcomes(frames.nth(0).frame_locator("iframe")) == BLOCKED  # they ran, and reached nothing

        dialog.get_by_role("tab", name="2. SVG picture").click()
        svg = frames.nth(1).frame_locator("iframe")
        expect(svg.locator("circle")).to_have_count(1, timeout=15_000)
        assert svg.locator("#out > *").count() == 0  # a picture runs no script

        dialog.get_by_role("tab", name="3. Mermaid diagram").click()
        diagram = frames.nth(2).frame_locator("iframe")
        if mermaid_script().is_file():
            expect(diagram.locator("svg").get_by_text("Start here")).to_be_visible(timeout=30_000)
            box = diagram.locator("svg").first.bounding_box()  # laid out at its size, though drawn in a hidden tab
            assert box is not None and box["height"] > 60 and box["width"] > 60, box
        else:  # make setup could not reach npm: the frame says so
            expect(diagram.get_by_text("The Mermaid library is not on this machine")).to_be_visible(timeout=30_000)
        page.screenshot(path=str(Path("test-artifacts") / "preview.png"))

        page.wait_for_timeout(1500)  # anything late would have gone by now
        assert leaked == [], f"a preview reached another server: {leaked}"
        outside = [r for r in answered if not r.startswith(url) and not r.startswith(("data:", "blob:", "about:"))]
        assert outside == [], outside
        assert not [r for r in answered if "preview-probe" in r]  # no script from the app's own URLs either
        try:
            packet = stun.recvfrom(2048)
        except BlockingIOError:
            packet = None
        assert packet is None, f"WebRTC sent a packet: {packet}"
        assert page.title() != "PWNED" and "PWNED" not in page.locator("body").inner_text()
        assert page.url.startswith(url)

        # A link to the preview page, opened as a page, draws nothing.
        opened = page.goto(f"{url}{PATH}#source={quote('<h1>Your session expired</h1>', safe='')}")
        assert opened is not None and opened.status == 403
        assert "Your session expired" not in page.locator("body").inner_text()
        context.close()
