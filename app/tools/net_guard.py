"""Server-side request forgery guard for tools that fetch URLs the model chose.

A URL may only be fetched if every address its host resolves to is public: no loopback, private, link-local
(cloud metadata at 169.254.169.254), carrier-grade NAT, multicast or reserved ranges, unless the host or its
network is allow-listed in DEMO_BROWSER_ALLOW (comma-separated host names, IP addresses or CIDR networks).
Callers check again on every redirect. (The check and the connection resolve separately, so a DNS server that
answers differently the second time could still slip through; the allow-list is the strict option.)
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from app.config import BrowserSettings
from app.tools.registry import ToolError

_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def _allow_list() -> tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    hosts: set[str] = set()
    networks = []
    for item in BrowserSettings.from_env().allow:
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            hosts.add(item)
    return hosts, networks


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast and address not in _CGNAT


def check_url(url: str) -> None:
    """Raise ToolError unless `url` is an http(s) URL whose host resolves only to allowed addresses."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be opened (got {parts.scheme or 'no scheme'!r}).")
    host = (parts.hostname or "").lower()
    if not host:
        raise ToolError(f"{url!r} has no host name.")
    allowed_hosts, allowed_networks = _allow_list()
    if host in allowed_hosts:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, ValueError) as exc:
        raise ToolError(f"cannot resolve {host!r} ({exc}); the computer may be offline.") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if any(address in network for network in allowed_networks):
            continue
        if not _is_public(address):
            raise ToolError(
                f"refused to open {url}: {host} resolves to {address}, a private, local or reserved address. "
                "(An administrator can allow it with DEMO_BROWSER_ALLOW.)"
            )
