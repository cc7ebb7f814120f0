"""Which code blocks of an answer get a preview, the frames that hold one, and the pages they load: served with
sandboxing policies of their own that the app's policy does not replace, and only into a frame."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.frontends.streamlit.csp import HEADER, ContentSecurityPolicy, policy
from app.frontends.streamlit.previews import route
from app.frontends.streamlit.previews.blocks import Preview, previews_in
from app.frontends.streamlit.previews.frame import frame_html


def test_html_svg_and_mermaid_blocks_are_found_in_order_and_nothing_else():
    text = ("Intro\n\n```python\nprint(1)\n```\n\n```HTML\n<p>hi</p>\n```\n\n"
            "- item\n\n  ```svg\n  <svg></svg>\n  ```\n\n"
            "```xml\n<?xml version='1.0'?>\n<!-- drawn by hand -->\n<svg xmlns='http://www.w3.org/2000/svg'/>\n```\n\n"
            "```xml\n<note/>\n```\n\n`inline <b>html</b>`\n\n```mermaid\ngraph TD\nA-->B\n```\n\n```html\n\n```\n\n"
            "```mermaid\nflowchart LR")
    found = previews_in(text, first_number=3)
    assert [(p.kind, p.number) for p in found] == [("html", 3), ("svg", 4), ("svg", 5), ("mermaid", 6),
                                                   ("mermaid", 7)]
    assert found[0].source == "<p>hi</p>\n" and found[4].source == "flowchart LR"  # unclosed: it shows as a block
    assert found[3].title == "6. Mermaid diagram"
    assert previews_in("No code here, only <b>words</b>.") == []
    assert previews_in("    <html>indented code is no fence</html>") == []


def test_a_page_has_scripts_to_run_only_when_it_says_so():
    assert Preview("html", "<p onclick='x()'>hi</p>", 1).has_script
    assert Preview("html", "<SCRIPT>alert(1)</SCRIPT>", 1).has_script
    assert not Preview("html", "<p>A page about scripts and onions</p>", 1).has_script


class _Frames(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[dict[str, str | None]] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "iframe":
            self.frames.append(dict(attrs))
        self.scripts += tag == "script"


def _frame(document: str) -> dict[str, str | None]:
    parsed = _Frames()
    parsed.feed(document)
    assert parsed.scripts == 0 and len(parsed.frames) == 1  # no script of ours, one frame, whatever the source
    return parsed.frames[0]


HOSTILE = '"></iframe><script>alert(1)</script><iframe src="https://evil.example/'


def test_a_page_is_drawn_without_scripts_unless_they_are_turned_on_and_never_with_the_apps_origin():
    static = _frame(frame_html(Preview("html", HOSTILE, 1)))
    assert static["sandbox"] == ""  # no scripts, no same origin, no navigation, pop-ups or forms
    assert static["srcdoc"] is not None and static["srcdoc"].endswith(HOSTILE)
    assert "default-src 'none'" in static["srcdoc"].split(">", 3)[2]  # its own policy comes first

    scripted = _frame(frame_html(Preview("html", HOSTILE, 1), scripts=True))
    assert scripted["sandbox"] == "allow-scripts"
    src = scripted["src"] or ""
    assert src.startswith(f"{route.PATH}#source=") and unquote(src.split("source=", 1)[1]) == HOSTILE

    diagram = _frame(frame_html(Preview("mermaid", "graph TD\nA-->B", 1)))
    assert diagram["sandbox"] == "allow-scripts" and (diagram["src"] or "").startswith(f"{route.MERMAID_PATH}#")
    svg = _frame(frame_html(Preview("svg", "<svg onload='x()'/>", 1), scripts=True))
    assert svg["sandbox"] == ""  # a picture never runs a script
    assert html.escape("<svg") not in (svg["srcdoc"] or "")  # the attribute was unescaped by the parser


def _served_app() -> TestClient:
    async def other(request):
        return PlainTextResponse("app")
    app = Starlette(routes=[*route.routes(), Route("/other", other)], middleware=[Middleware(ContentSecurityPolicy)])
    return TestClient(app)


def test_the_pages_keep_their_own_sandboxing_policies_and_the_app_keeps_its_own():
    client = _served_app()
    frame = {"Sec-Fetch-Dest": "iframe"}
    for path, scripts in ((route.PATH, "script-src 'unsafe-inline'"), (route.MERMAID_PATH, "'strict-dynamic'")):
        page = client.get(path, headers=frame)
        assert page.status_code == 200 and "location.hash" in page.text and "window.parent === window" in page.text
        rules = [rule.strip() for rule in page.headers[HEADER].split(";")]
        assert rules[0] == "sandbox allow-scripts"
        for rule in ("default-src 'none'", "connect-src 'none'", "img-src data: blob:", "frame-src 'none'",
                     "form-action 'none'"):
            assert rule in rules
        (script_rule,) = [rule for rule in rules if rule.startswith("script-src")]
        assert scripts in script_rule and "'self'" not in script_rule  # no script from the app's own URLs
        assert not any("allow-same-origin" in rule or "allow-top-navigation" in rule for rule in rules)
        assert page.headers["x-content-type-options"] == "nosniff"
        opened = client.get(path, headers={"Sec-Fetch-Dest": "document"})  # a link to it, opened as a page
        assert opened.status_code == 403 and "only draws inside" in opened.text
    mermaid_page = client.get(route.MERMAID_PATH, headers=frame)
    assert "RTCPeerConnection" in client.get(route.PATH, headers=frame).text
    assert route._digest(route._MERMAID_SCRIPT) in mermaid_page.headers[HEADER]  # its own script, by its hash
    assert client.get("/other").headers[HEADER] == policy()


def test_mermaid_is_served_from_this_machine_or_the_page_says_how_to_get_it(tmp_path, monkeypatch):
    script = tmp_path / "mermaid.min.js"
    monkeypatch.setenv("DEMO_MERMAID_JS", str(script))
    client = _served_app()
    missing = client.get(f"{route.PATH}/mermaid.js")
    assert missing.status_code == 404 and "make mermaid" in missing.text
    script.write_text("globalThis.mermaid = {};")
    served = client.get(f"{route.PATH}/mermaid.js")
    assert served.status_code == 200 and served.text == "globalThis.mermaid = {};"
    assert served.headers["content-type"].startswith("text/javascript")
