"""Which code blocks of an answer get a preview, the frame that holds one, and the page it loads: served with a
sandboxing policy of its own that the app's policy does not replace."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.frontends.streamlit.csp import HEADER, ContentSecurityPolicy, policy
from app.frontends.streamlit.previews import route
from app.frontends.streamlit.previews.blocks import MAX_SOURCE_CHARS, Preview, previews_in
from app.frontends.streamlit.previews.frame import frame_html


def test_html_svg_and_mermaid_blocks_are_found_in_order_and_nothing_else():
    text = ("Intro\n\n```python\nprint(1)\n```\n\n```HTML\n<p>hi</p>\n```\n\n"
            "- item\n\n  ```svg\n  <svg></svg>\n  ```\n\n"
            "```xml\n<svg xmlns='http://www.w3.org/2000/svg'/>\n```\n\n```xml\n<note/>\n```\n\n"
            "`inline <b>html</b>`\n\n```mermaid\ngraph TD\nA-->B\n```\n\n```html\n\n```\n\n```mermaid\nflowchart LR")
    found = previews_in(text)
    assert [(p.kind, p.number) for p in found] == [("html", 1), ("svg", 2), ("svg", 3), ("mermaid", 4),
                                                   ("mermaid", 5)]
    assert found[0].source == "<p>hi</p>\n" and found[4].source == "flowchart LR"  # unclosed: it shows as a block
    assert found[3].title == "4. Mermaid diagram"
    assert previews_in("No code here, only <b>words</b>.") == []
    assert previews_in("    <html>indented code is no fence</html>") == []


class _Frames(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[dict[str, str | None]] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "iframe":
            self.frames.append(dict(attrs))
        self.scripts += tag == "script"


def test_the_frame_holds_no_script_and_one_sandboxed_frame_whatever_the_source_says():
    source = '"></iframe><script>alert(1)</script><iframe src="https://evil.example/'
    document = _Frames()
    document.feed(frame_html(Preview("html", source, 1)))
    assert document.scripts == 0 and len(document.frames) == 1
    frame = document.frames[0]
    assert frame["sandbox"] == "allow-scripts"  # no allow-same-origin, no top navigation, pop-ups or forms
    src = frame["src"] or ""
    assert src.startswith(f"{route.PATH}#kind=html&source=")
    assert unquote(src.split("source=", 1)[1]) == source  # the whole source, as data in the fragment


def test_a_block_over_the_limit_is_not_previewed():
    assert Preview("html", "x" * (MAX_SOURCE_CHARS + 1), 1).too_large
    assert not Preview("html", "x" * MAX_SOURCE_CHARS, 1).too_large


def _served_app() -> TestClient:
    async def other(request):
        return PlainTextResponse("app")
    app = Starlette(routes=[*route.routes(), Route("/other", other)], middleware=[Middleware(ContentSecurityPolicy)])
    return TestClient(app)


def test_the_preview_page_keeps_its_own_sandboxing_policy_and_the_app_keeps_its_own():
    client = _served_app()
    page = client.get(route.PATH)
    assert page.status_code == 200 and "location.hash" in page.text
    rules = [rule.strip() for rule in page.headers[HEADER].split(";")]
    assert rules[0] == "sandbox allow-scripts"
    for rule in ("default-src 'none'", "connect-src 'none'", "img-src data: blob:", "frame-src 'none'",
                 "form-action 'none'"):
        assert rule in rules
    assert not any("allow-same-origin" in rule or "allow-top-navigation" in rule for rule in rules)
    assert page.headers["x-content-type-options"] == "nosniff"
    assert client.get("/other").headers[HEADER] == policy()


def test_mermaid_is_served_from_this_machine_or_the_page_says_how_to_get_it(tmp_path, monkeypatch):
    script = tmp_path / "mermaid.min.js"
    monkeypatch.setenv("DEMO_MERMAID_JS", str(script))
    client = _served_app()
    missing = client.get(f"{route.PATH}/mermaid.js")
    assert missing.status_code == 404 and "make setup" in missing.text
    script.write_text("globalThis.mermaid = {};")
    served = client.get(f"{route.PATH}/mermaid.js")
    assert served.status_code == 200 and served.text == "globalThis.mermaid = {};"
    assert served.headers["content-type"].startswith("text/javascript")
    assert served.headers[HEADER].startswith("sandbox allow-scripts;")
