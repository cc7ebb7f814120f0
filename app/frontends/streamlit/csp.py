"""The Content-Security-Policy the app is served with: the browser itself refuses to load anything from another
origin (images, media, styles, fonts, frames, scripts, connections), whatever a page draws.

A second line behind app/frontends/streamlit/safe_markdown.py, which keeps remote images out of the markdown in the
first place. Streamlit has no setting for response headers; st.App (its ASGI app) takes Starlette middleware, which is
how app/frontends/streamlit/web.py adds this header. The inline scripts of Streamlit's own index.html are allowed by
their hashes, so no other inline script runs; inline styles stay allowed because Streamlit's components style themselves
with them.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "Content-Security-Policy"


@cache
def policy() -> str:
    """Same origin only; pictures, media and the recorder's reads also from data: and blob: URLs, which never leave
    the browser."""
    scripts = " ".join(f"'sha256-{digest}'" for digest in _inline_script_hashes())
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' {scripts}".strip(),
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "media-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self' blob:",  # the chat input's recorder reads its recording back from a blob: URL
        "worker-src 'self' blob:",
        "frame-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'self'",
    ])


def _inline_script_hashes() -> list[str]:
    import streamlit

    index = Path(streamlit.__file__).parent / "static" / "index.html"
    html = index.read_text(encoding="utf-8") if index.exists() else ""
    bodies = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", html, re.DOTALL)
    return [base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() for body in bodies]


class ContentSecurityPolicy:
    """ASGI middleware: the policy on every HTTP response (the WebSocket needs none) that has none of its own. Only
    the preview page has one (app/frontends/streamlit/previews/route.py): stricter, and sandboxed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).setdefault(HEADER, policy())
            await send(message)

        await self.app(scope, receive, send_with_policy)
