"""Server-side request forgery guard for tools that fetch URLs the model chose.

A URL may only be fetched if every address its host resolves to is public: no loopback, private, link-local
(cloud metadata at 169.254.169.254), carrier-grade NAT, multicast or reserved ranges, unless the host or its
network is allow-listed in DEMO_BROWSER_ALLOW (comma-separated host names, IP addresses or CIDR networks).
An IPv6 address that carries an IPv4 address (IPv4-mapped or -compatible, NAT64, SIIT, 6to4, Teredo) must be
public itself and so must the IPv4 address it leads to. Odd IPv4 spellings (2130706433, 0177.0.0.1, 127.1,
0x7f.1) are judged by the address they resolve to, like host names. Callers check again on every redirect.
`fetch_guarded` connects to the very address the check judged (the request goes to that IP, with the host name in
the Host header and as TLS SNI, and the certificate is verified for the name), so a DNS server that answers
differently the second time (DNS rebinding) cannot redirect the connection; an allow-listed host name is trusted
and resolved as usual. Every failure, whatever httpx raised, is a ToolError.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from app.config import BrowserSettings
from app.tools.tool_registry import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 5
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# Prefixes whose last 32 bits are an IPv4 address the traffic ends up at (RFC 4291, 6052, 6145).
_IPV4_IN_LOW_BITS = tuple(ipaddress.ip_network(net) for net in (
    "::/96",  # IPv4-compatible (deprecated, but some stacks still route it)
    "::ffff:0:0/96",  # IPv4-mapped
    "::ffff:0:0:0/96",  # SIIT, IPv4-translated
    "64:ff9b::/96",  # NAT64 well-known prefix
))
# NAT64 local-use prefix (RFC 8215): not globally reachable, and where its IPv4 part sits depends on the
# operator's prefix length, so it is refused as a whole (older Pythons' is_global, 3.11.7's too, call it global).
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def _allow_list() -> tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    hosts: set[str] = set()
    networks = []
    for item in BrowserSettings.from_env().allow:
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            hosts.add(item)
    return hosts, networks


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to by the IPv4 transition schemes (none for plain IPv6 or IPv4)."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    if any(address in network for network in _IPV4_IN_LOW_BITS):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)  # (server, client): traffic can reach either
    return found


def _is_public_one(address: IPAddress) -> bool:
    # Site-local fec0::/10 is deprecated but still routable inside a site; Python calls it global.
    if isinstance(address, ipaddress.IPv6Address) and (address.is_site_local or address in _NAT64_LOCAL_USE):
        return False
    return address.is_global and not address.is_multicast and address not in _CGNAT


def is_public(address: IPAddress) -> bool:
    """True if `address` is a public unicast address, and so is every IPv4 address embedded in it."""
    return all(_is_public_one(candidate) for candidate in (address, *embedded_ipv4(address)))


def _describe(address: IPAddress) -> str:
    embedded = embedded_ipv4(address)
    return f"{address} (which leads to {', '.join(map(str, embedded))})" if embedded else str(address)


def check_url(url: str) -> IPAddress | None:
    """Raise ToolError unless `url` is an http(s) URL whose host resolves only to allowed addresses. Returns the
    address to connect to (the first one it resolves to), or None for an allow-listed host name."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be opened (got {parts.scheme or 'no scheme'!r}).")
    host = (parts.hostname or "").lower()
    if not host:
        raise ToolError(f"{url!r} has no host name.")
    allowed_hosts, allowed_networks = _allow_list()
    if host in allowed_hosts:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, ValueError) as exc:
        raise ToolError(f"cannot resolve {host!r} ({exc}); the computer may be offline.") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if any(address in network for network in allowed_networks):
            continue
        if not is_public(address):
            raise ToolError(
                f"refused to open {url}: {host} resolves to {_describe(address)}, a private, local or reserved "
                "address. (An administrator can allow it with DEMO_BROWSER_ALLOW.)"
            )
    if not addresses:
        raise ToolError(f"cannot resolve {host!r}; the computer may be offline.")
    return addresses[0]


def _pinned(url: str, address: IPAddress | None) -> tuple[str, dict[str, str], dict[str, str]]:
    """(URL, headers, httpx extensions) that reach `url` at `address`: the IP in the URL, the name in the Host header
    and as TLS SNI (httpx then verifies the certificate for the name). Unchanged for address None."""
    if address is None:
        return url, {}, {}
    parts, target = urlsplit(url), httpx.URL(url)
    ip = f"[{address}]" if address.version == 6 else str(address)
    netloc = ip + (f":{parts.port}" if parts.port else "")
    extensions = {"sni_hostname": target.host} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": target.netloc.decode("ascii")}, extensions


def fetch_guarded(url: str, max_bytes: int, timeout_s: float, what: str = "file",
                  user_agent: str = "composite-llm-demo/1.0") -> tuple[str, str, bytes]:
    """(final URL, content type, body) of a GET, checking the guard before every hop (redirects are followed
    here, never by httpx) and reading at most `max_bytes`, all within `timeout_s` in total (httpx's timeout is per
    read: a server trickling a byte at a time would hold the call for ever). Every failure is a ToolError that says
    what happened."""
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, headers={"User-Agent": user_agent}) as http:
            for _ in range(MAX_REDIRECTS + 1):
                if time.monotonic() > deadline:
                    raise ToolError(f"{url} took too long to answer (redirects included); the site is too slow.")
                pinned, host_header, extensions = _pinned(url, check_url(url))
                with http.stream("GET", pinned, headers=host_header, extensions=extensions) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code >= 400:
                        raise ToolError(f"{url} answered HTTP {response.status_code}.")
                    body = _read_capped(response, max_bytes, what, deadline)
                    return url, response.headers.get("content-type", ""), body
    except (httpx.ConnectError, httpx.TimeoutException, httpx.NetworkError) as exc:
        raise ToolError(f"could not reach {url} ({type(exc).__name__}); the computer may be offline.") from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, ValueError) as exc:  # InvalidURL is no HTTPError
        raise ToolError(f"could not open {url[:200]}: {str(exc)[:200]}") from None
    raise ToolError(f"{url} redirected more than {MAX_REDIRECTS} times.")


def _read_capped(response: httpx.Response, max_bytes: int, what: str, deadline: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ToolError(f"the {what} is larger than {max_bytes / 2**20:g} MB.")
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise ToolError(f"the {what} is larger than {max_bytes / 2**20:g} MB.")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise ToolError(f"the {what} took too long to arrive; the site is too slow.")
    return b"".join(chunks)
