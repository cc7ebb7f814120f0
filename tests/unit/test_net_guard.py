"""The web guard's own guarantees (issue 23, finding 7): whatever httpx raises is the guard's ToolError, and the
connection goes to the address the check judged, whatever DNS answers the second time (rebinding)."""

from __future__ import annotations

import socket

import pytest

from app.tools import net_guard
from app.tools.net_guard import fetch_guarded
from app.tools.tool_registry import ToolError
from harness.local_http import serve

PAGE = (200, {"Content-Type": "text/plain"}, b"the checked server")


@pytest.fixture
def site(monkeypatch):
    routes = {"/page": lambda h, b: (*PAGE[:2], PAGE[2] + f" saw Host: {h.headers['Host']}".encode()),
              "/to-data": lambda h, b: (302, {"Location": "data:text/html,<h1>hi</h1>"}, b""),
              "/to-bad-host": lambda h, b: (302, {"Location": "http://[::1/"}, b"")}
    with serve(routes) as base:
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")  # the network, not a host name: checked by address
        yield base


@pytest.mark.parametrize("path", ["/to-data", "/to-bad-host"])
def test_an_invalid_redirect_target_is_the_guards_own_error(site, path):
    with pytest.raises(ToolError, match="could not open"):
        fetch_guarded(f"{site}{path}", 10_000, 5)


def test_an_invalid_url_is_the_guards_own_error(site):
    with pytest.raises(ToolError):
        fetch_guarded(f"{site}/\x7f", 10_000, 5)


def test_the_connection_goes_to_the_checked_address_whatever_dns_answers_next(site, monkeypatch):
    """The first answer (127.0.0.1, allowed) is checked; every later one says 10.255.255.1, private and refused,
    a rebinding attack. The page must come from 127.0.0.1, asked for by its name."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = "127.0.0.1" if len(asked) == 1 else "10.255.255.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = site.rsplit(":", 1)[1]
    final, _, body = fetch_guarded(f"http://rebind.example:{port}/page", 10_000, 2)
    assert body == f"the checked server saw Host: rebind.example:{port}".encode()
    assert final == f"http://rebind.example:{port}/page" and asked == ["rebind.example"]


def test_https_is_pinned_with_the_name_as_sni(monkeypatch):
    # No TLS server here: the request that would be sent is inspected instead.
    monkeypatch.setattr(net_guard, "check_url", lambda url: net_guard.ipaddress.ip_address("93.184.216.34"))
    url, headers, extensions = net_guard._pinned("https://example.com/a?b=1", net_guard.check_url(""))
    assert (url, headers, extensions) == ("https://93.184.216.34/a?b=1", {"Host": "example.com"},
                                          {"sni_hostname": "example.com"})
    url, headers, _ = net_guard._pinned("http://example.com:8080/", net_guard.ipaddress.ip_address("2606:2800::1"))
    assert (url, headers) == ("http://[2606:2800::1]:8080/", {"Host": "example.com:8080"})


def test_a_site_that_trickles_its_body_is_cut_at_the_whole_time_limit(monkeypatch):
    """httpx's timeout is per read: a byte every 0.3 s never trips it, and once held a fetch for ever."""
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()

    def trickle() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n")
            while not done.wait(0.3):
                try:
                    connection.sendall(b"x")
                except OSError:
                    return

    threading.Thread(target=trickle, daemon=True).start()
    monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match="took too long"):
            fetch_guarded(f"http://127.0.0.1:{port}/slow", 10_000, 1.5)
    finally:
        done.set()
        listener.close()
    assert time.monotonic() - started < 3
