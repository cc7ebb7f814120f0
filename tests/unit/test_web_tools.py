"""The web browsing tools against real HTTP servers on 127.0.0.1 (allow-listed, as an admin would)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import parse_qs, urlparse

import pytest

from app.tools import net_guard
from app.tools.browser import WebBrowser, cited_sources
from app.tools.net_guard import check_url
from app.tools.tool_registry import ToolError
from harness.local_http import json_reply, serve
from tests.helpers import ARTICLE, html, pdf_bytes


@pytest.fixture
def site(monkeypatch):
    routes = {
        "/article": html(ARTICLE),
        "/redirect-home": lambda h, b: (302, {"Location": "/article"}, b""),
        "/redirect-metadata": lambda h, b: (302, {"Location": "http://169.254.169.254/latest/meta-data"}, b""),
        "/redirect-nat64": lambda h, b: (302, {"Location": f"http://[64:ff9b::7f00:1]:{h.server.server_port}/"}, b""),
        "/image.png": lambda h, b: (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n"),
        "/huge": lambda h, b: (200, {"Content-Type": "text/plain"}, b"x" * (4 * 1024 * 1024)),
        "/notes.txt": lambda h, b: (200, {"Content-Type": "text/plain; charset=latin-1"},
                                    "Café crème".encode("latin-1")),
        "/paper.pdf": lambda h, b: (200, {"Content-Type": "application/pdf"},
                                    pdf_bytes("Tides are caused by the Moon.")),
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
    linked = f"It is very bright [[1]]({site}/article). See [7]."
    assert browser.link_citations("It is very bright [1]. See [7].") == linked
    assert cited_sources(text) == [(1, "Lighthouses of Brittany", f"{site}/article")]
    assert browser.open_url(f"{site}/redirect-home").startswith("[1] ")  # same page, same number


def test_search_numbers_results_and_mclick_opens_them(site):
    browser = WebBrowser()
    results = browser.web_search("lighthouse", recency_days=7)
    assert results.startswith(f"[1] Lighthouses of Brittany ({site}/article)")
    assert f"[2] Notes ({site}/notes.txt)" in results
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


# ----- the SSRF guard itself: addresses are only resolved (numeric hosts need no network), never connected to ---

def _refusal(url: str) -> str:
    with pytest.raises(ToolError, match="private, local or reserved address") as caught:
        check_url(url)
    return str(caught.value)


@pytest.mark.parametrize(
    "host, leads_to",
    [
        ("[::127.0.0.1]", "127.0.0.1"),  # IPv4-compatible
        ("[::ffff:127.0.0.1]", "127.0.0.1"),  # IPv4-mapped
        ("[::ffff:0:7f00:1]", "127.0.0.1"),  # SIIT, IPv4-translated
        ("[64:ff9b::7f00:1]", "127.0.0.1"),  # NAT64 well-known prefix
        ("[64:ff9b::a9fe:a9fe]", "169.254.169.254"),  # NAT64 to the cloud metadata address
        ("[64:ff9b::a00:1]", "10.0.0.1"),
        ("[2002:7f00:1::]", "127.0.0.1"),  # 6to4
        ("[2002:a9fe:a9fe::1]", "169.254.169.254"),
    ],
)
def test_ipv6_forms_of_private_ipv4_addresses_are_refused(host, leads_to, monkeypatch):
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    assert f"(which leads to {leads_to})" in _refusal(f"http://{host}/latest/meta-data")


@pytest.mark.parametrize("host", ["2130706433", "0177.0.0.1", "127.1", "0x7f.1", "0x7f000001", "017700000001"])
def test_odd_spellings_of_loopback_are_judged_by_their_address(host, monkeypatch):
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    assert "resolves to 127.0.0.1," in _refusal(f"http://{host}:8080/")


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "::ffff:169.254.169.254", "fd00::1", "64:ff9b:1::5db8:d822"])
def test_a_host_name_resolving_to_a_private_form_is_refused(address, monkeypatch):
    # DNS (or DNS64) hands out these forms for ordinary names: the resolved address is what is judged.
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    answer = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 80, 0, 0))]
    monkeypatch.setattr(net_guard.socket, "getaddrinfo", lambda *args, **kwargs: answer)
    shown = ipaddress.ip_address(address)  # as Python spells it (::ffff:a9fe:a9fe before 3.13)
    assert f"intranet.example.com resolves to {shown}" in _refusal("http://intranet.example.com/")


def test_a_redirect_to_an_ipv6_form_of_loopback_is_refused(site):
    # The test server itself is allow-listed as 127.0.0.1; its NAT64 spelling is not, and is checked on the hop.
    with pytest.raises(ToolError, match=r"64:ff9b::7f00:1 \(which leads to 127.0.0.1\)"):
        WebBrowser().open_url(f"{site}/redirect-nat64")


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "https://[2606:2800::1]/", "http://[64:ff9b::5db8:d822]/"])
def test_public_addresses_pass(url, monkeypatch):
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    check_url(url)  # no exception: allowed


@pytest.mark.parametrize(
    "address, public",
    [
        # (Public 6to4 and IPv4-mapped addresses are left out: newer Pythons call those ranges non-global.)
        ("93.184.216.34", True), ("2606:2800::1", True), ("64:ff9b::5db8:d822", True),
        ("2002:c0a8:1::1", False), ("::ffff:0:a9fe:a9fe", False), ("64:ff9b:1::5db8:d822", False),
        ("fec0::1", False), ("fe80::1", False), ("ff02::1", False), ("100.64.0.1", False), ("0.0.0.0", False),
    ],
)
def test_is_public(address, public):
    assert net_guard.is_public(ipaddress.ip_address(address)) is public


def test_embedded_ipv4_reads_every_transition_scheme():
    def embedded(text: str) -> list[str]:
        return [str(a) for a in net_guard.embedded_ipv4(ipaddress.ip_address(text))]

    assert embedded("::ffff:10.1.2.3") == ["10.1.2.3"]
    assert embedded("2002:0a01:0203::5") == ["10.1.2.3"]
    assert embedded("2001:0:5db8:d822::80ff:fffe") == ["93.184.216.34", "127.0.0.1"]  # Teredo: server, client
    assert embedded("2606:2800::1") == [] and embedded("127.0.0.1") == []
