"""The pages a preview frame loads when its block needs a script, served by the app itself (added to st.App in
app/frontends/streamlit/web.py). A page's source travels in the URL's fragment, which never reaches a server.

- GET /preview draws an HTML page whose scripts the person chose to run (frame.py draws pages without scripts by
  default, straight from srcdoc, needing no page of ours).
- GET /preview/mermaid draws a Mermaid diagram with the library GET /preview/mermaid.js serves from this machine
  (`make setup` fetches it with npm; no CDN), in Mermaid's strict mode.

Each page's own Content-Security-Policy header keeps what it draws in its frame: `sandbox allow-scripts` gives it an
opaque origin (no cookie, storage or DOM of the app's; no top navigation, pop-ups or forms) and `default-src 'none'`
with `connect-src 'none'` lets it fetch nothing. The HTML page's scripts may be inline only (no script from anywhere,
the app included); the Mermaid page runs its own script (by its hash) and what that script adds (the library). A
page opened other than in a frame draws nothing: a link to it is no page on the app's origin. One way out CSP does
not govern is WebRTC: the HTML page takes it away from the window its scripts run in before writing them, a hurdle
rather than a wall (a script can reach a fresh frame's own through window[0]), which is why running a page's
scripts is the person's choice, and frame.py says so where it is chosen.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app.config import mermaid_script

PATH = "/preview"
MERMAID_PATH = f"{PATH}/mermaid"

_COMMON = [
    "sandbox allow-scripts",
    "default-src 'none'",
    "style-src 'unsafe-inline'",
    "img-src data: blob:",
    "media-src data: blob:",
    "font-src data:",
    "connect-src 'none'",
    "frame-src 'none'",
    "worker-src 'none'",
    "form-action 'none'",
    "base-uri 'none'",
    "frame-ancestors 'self'",
]
_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
_ONLY_IN_A_FRAME = """if (window.parent === window) {
  document.documentElement.textContent = "This page only draws inside the app's Preview.";
  throw new Error("not in a frame");
}
var fragment = new URLSearchParams(location.hash.slice(1)), source = fragment.get("source") || "";
function problem(text) {
  var box = document.createElement("div"); box.className = "problem"; box.textContent = text;
  document.body.replaceChildren(box);
}
"""

# WebRTC is taken away before the page is written (the same window lives on through document.open), from this
# window and from frame elements (window[0] still reaches a fresh frame's window: a hurdle, not a wall); then the
# page replaces this document, from a task (document.open does nothing while this one is still being parsed).
_HTML_SCRIPT = _ONLY_IN_A_FRAME + """["RTCPeerConnection", "webkitRTCPeerConnection", "RTCDataChannel",
 "RTCIceTransport", "RTCRtpSender", "RTCRtpReceiver"].forEach(function (name) {
  try { Object.defineProperty(window, name, {value: undefined, writable: false, configurable: false}); }
  catch (e) {}
});
[HTMLIFrameElement, HTMLFrameElement, HTMLObjectElement, HTMLEmbedElement].forEach(function (kind) {
  ["contentWindow", "contentDocument"].forEach(function (name) {
    try { Object.defineProperty(kind.prototype, name, {get: function () { return null; }, configurable: false}); }
    catch (e) {}
  });
});
setTimeout(function () { document.open(); document.write(source); document.close(); }, 0);
"""

_MERMAID_SCRIPT = _ONLY_IN_A_FRAME + """var script = document.createElement("script");
script.src = "mermaid.js";
script.onerror = function () {
  problem("The Mermaid library is not on this machine: run `make mermaid` (it fetches it with npm) and reload.");
};
function draw() {
  var diagram = document.createElement("pre"); diagram.className = "mermaid"; diagram.textContent = source;
  document.body.replaceChildren(diagram);
  mermaid.initialize({startOnLoad: false, securityLevel: "strict"});
  mermaid.run({nodes: [diagram]}).catch(function (error) {
    problem("Mermaid cannot draw this diagram: " + (error && error.message ? error.message : error));
  });
}
// A frame in a tab not yet shown has no size, and Mermaid would lay the diagram out at zero: wait for one.
script.onload = function () {
  if (innerWidth > 0) { draw(); return; }
  addEventListener("resize", function shown() {
    if (innerWidth > 0) { removeEventListener("resize", shown); draw(); }
  });
};
document.head.appendChild(script);
"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Preview</title>
<style>body{margin:0;font:14px sans-serif} .problem{color:#b00;padding:1em;white-space:pre-wrap}</style>
</head><body><script>%s</script></body></html>
"""


def _digest(script: str) -> str:
    return base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


@cache
def html_policy() -> str:
    """The HTML page's: inline scripts (the page's own) and nothing from anywhere."""
    return "; ".join([*_COMMON, "script-src 'unsafe-inline'"])


@cache
def mermaid_policy() -> str:
    """The Mermaid page's: its own script by hash, and the library it adds (strict-dynamic: nothing else)."""
    return "; ".join([*_COMMON, f"script-src 'sha256-{_digest(_MERMAID_SCRIPT)}' 'strict-dynamic'"])


def _in_a_frame(request: Request) -> bool:
    """Browsers say where a response goes (Sec-Fetch-Dest, on localhost and HTTPS): only a frame may have these."""
    destination = request.headers.get("sec-fetch-dest")
    return destination is None or destination == "iframe"


def _refused() -> Response:
    return PlainTextResponse("This page only draws inside the app's Preview.", status_code=403, headers=_HEADERS)


async def _html_page(request: Request) -> Response:
    if not _in_a_frame(request):
        return _refused()
    return HTMLResponse(_PAGE % _HTML_SCRIPT, headers={**_HEADERS, "Content-Security-Policy": html_policy()})


async def _mermaid_page(request: Request) -> Response:
    if not _in_a_frame(request):
        return _refused()
    return HTMLResponse(_PAGE % _MERMAID_SCRIPT, headers={**_HEADERS, "Content-Security-Policy": mermaid_policy()})


async def _mermaid(request: Request) -> Response:
    path: Path = mermaid_script()
    headers = {**_HEADERS, "Content-Security-Policy": "default-src 'none'; sandbox"}
    if not path.is_file():
        return PlainTextResponse(f"Mermaid is not installed at {path}: run `make mermaid`.", status_code=404,
                                 headers=headers)
    return FileResponse(path, media_type="text/javascript", headers={**headers, "Cache-Control": "max-age=86400"})


def routes() -> list[BaseRoute]:
    return [Route(PATH, _html_page, methods=["GET"]), Route(MERMAID_PATH, _mermaid_page, methods=["GET"]),
            Route(f"{PATH}/mermaid.js", _mermaid, methods=["GET"])]
