"""The web browsing tools against real HTTP servers on 127.0.0.1 (allow-listed, as an admin would)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from app.tools.browser import WebBrowser, cited_sources
from app.tools.registry import ToolError
from harness.local_http import json_reply, serve
from tests.helpers import ARTICLE, html, pdf_bytes


@pytest.fixture
def site(monkeypatch):
    routes = {
        "/article": html(ARTICLE),
        "/redirect-home": lambda h, b: (302, {"Location": "/article"}, b""),
        "/redirect-metadata": lambda h, b: (302, {"Location": "http://169.254.169.254/latest/meta-data"}, b""),
        "/image.png": lambda h, b: (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n"),
        "/huge": lambda h, b: (200, {"Content-Type": "text/plain"}, b"x" * (4 * 1024 * 1024)),
        "/notes.txt": lambda h, b: (200, {"Content-Type": "text/plain; charset=latin-1"}, "Café crème".encode("latin-1")),
        "/paper.pdf": lambda h, b: (200, {"Content-Type": "application/pdf"}, pdf_bytes("Tides are caused by the Moon.")),
        "/search": searxng,
    }
    with serve(routes) as base:
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
        monkeypatch.setenv("DEMO_SEARXNG_URL", base)
        yield base


def searxng(handler, body):
    """SearXNG's JSON API: GET /search?q=...&format=json -> {"results": [{title, url, content}]}."""
    query = parse_qs(urlparse(handler.path).query)
    assert query["format"] == ["json"]
    base = f"http://127.0.0.1:{handler.server.server_address[1]}"
    return json_reply({"query": query["q"][0], "results": [
        {"title": "Lighthouses of Brittany", "url": f"{base}/article", "content": "The Phare du Creac'h..."},
        {"title": "Notes", "url": f"{base}/notes.txt", "content": "Some notes"},
    ]})


def test_open_extracts_the_article_numbers_it_and_cites_it(site):
    browser = WebBrowser()
    text = browser.open_url(f"{site}/article")
    assert text.startswith(f"[1] Lighthouses of Brittany ({site}/article)")
    assert "32 nautical" in text and "Home | About" not in text and "Copyright" not in text
    assert browser.link_citations("It is very bright [1]. See [7].") == f"It is very bright [[1]]({site}/article). See [7]."
    assert cited_sources(text) == [(1, "Lighthouses of Brittany", f"{site}/article")]
    assert browser.open_url(f"{site}/redirect-home").startswith("[1] ")  # same page, same number


def test_search_numbers_results_and_mclick_opens_them(site):
    browser = WebBrowser()
    results = browser.web_search("lighthouse", recency_days=7)
    assert results.startswith(f"[1] Lighthouses of Brittany ({site}/article)") and f"[2] Notes ({site}/notes.txt)" in results
    opened = browser.mclick([2, 9])
    assert "Café crème" in opened and "[9] Error: there is no result [9]" in opened


def test_pdf_and_text_are_read_and_other_types_refused(site):
    browser = WebBrowser()
    assert "Tides are caused by the Moon." in browser.open_url(f"{site}/paper.pdf")
    with pytest.raises(ToolError, match="image/png, which cannot be read as text"):
        browser.open_url(f"{site}/image.png")
    with pytest.raises(ToolError, match="larger than 3 MB"):
        browser.open_url(f"{site}/huge")


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/", "http://10.1.2.3/", "http://169.254.169.254/latest/meta-data", "http://[::1]/",
     "http://192.168.0.1/admin", "http://100.64.0.1/"],
)
def test_private_addresses_are_refused_without_allow_list(url, monkeypatch):
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    with pytest.raises(ToolError, match="private, local or reserved address"):
        WebBrowser().open_url(url)


def test_a_redirect_to_a_private_address_is_refused(site):
    with pytest.raises(ToolError, match="169.254.169.254"):
        WebBrowser().open_url(f"{site}/redirect-metadata")


def test_only_http_urls(site):
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://x"):
        with pytest.raises(ToolError, match="only http and https"):
            WebBrowser().open_url(url)


def test_offline_search_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("DEMO_SEARXNG_URL", raising=False)
    monkeypatch.setenv("DEMO_SEARXNG_URL", "http://127.0.0.1:9")
    with pytest.raises(ToolError, match="SearXNG server at http://127.0.0.1:9 failed"):
        WebBrowser().web_search("anything")
