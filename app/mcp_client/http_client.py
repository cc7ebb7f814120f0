"""The HTTP side of a Streamable HTTP connection, where the SDK leaves it open: what a server's answer may weigh, and
which address a user's server is reached at.

- Every answer is read no further than McpSettings.max_result_mb (`cap_body`). The SDK caps one SSE event
  (`max_sse_event_size`, given the same limit) but reads a plain JSON answer whole: a server that answered
  `application/json` with 100 MB of text had all of it kept.
- A server a user added is reached at the address the SSRF guard judged (`PinnedTransport`), as the browser's
  `fetch_guarded` does (app/tools/net_guard.py): the request goes to that IP, with the name in the Host header and
  as TLS SNI (the certificate is verified for the name). Connecting by name again let a DNS server answer
  differently the second time (DNS rebinding) and send the user's bearer token to 127.0.0.1. Requests elsewhere
  (a sign-in's metadata, registration and token endpoints) are checked and pinned one by one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio.to_thread
import httpx2

from app.tools.net_guard import IPAddress, check_url

_MB = 2**20


class AnswerTooLarge(httpx2.StreamError):
    """An answer over the limit. A StreamError, so that the SDK turns it into an error for the request it answered
    (and keeps the connection) instead of failing the whole transport."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int, declared: str) -> None:
        self._inner, self._max, self._declared = inner, max_bytes, declared

    def _too_large(self) -> AnswerTooLarge:
        return AnswerTooLarge(f"the server's answer is larger than {self._max / _MB:g} MB (DEMO_MCP_MAX_RESULT_MB), "
                              "so it was not read")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared.isdigit() and int(self._declared) > self._max:
            raise self._too_large()
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._max:  # checked as it streams: nothing past the limit is kept
                raise self._too_large()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def cap_body(max_bytes: int) -> Callable[[httpx2.Response], Awaitable[None]]:
    """A response hook that makes reading the body fail past `max_bytes`; an SSE stream is left to the SDK, which
    caps each of its events (a GET stream of notifications may rightly run for hours)."""

    async def cap(response: httpx2.Response) -> None:
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "text/event-stream":
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Capped(response.stream, max_bytes, response.headers.get("content-length", ""))

    return cap


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to an address the SSRF guard approved: the server's own origin to `address` (checked when
    the connection was made), any other URL checked now. ToolError for a URL the guard refuses. An allow-listed host
    name (the guard returns no address) is trusted and resolved as usual."""

    def __init__(self, server_url: str, address: IPAddress | None) -> None:
        own = httpx2.URL(server_url)
        self._origin, self._address = (own.scheme, own.host, own.port), address
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if (url.scheme, url.host, url.port) == self._origin:
            address = self._address
        else:
            address = await anyio.to_thread.run_sync(check_url, str(url))
        if address is not None:
            # The client puts the original request back on the response: the SDK's redirect checks still see names.
            extensions = {**request.extensions, **({"sni_hostname": url.host} if url.scheme == "https" else {})}
            request = httpx2.Request(request.method, url.copy_with(host=str(address)), headers=request.headers,
                                     stream=request.stream, extensions=extensions)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
