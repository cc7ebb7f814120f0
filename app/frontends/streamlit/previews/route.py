"""The page a preview frame loads, served by the app itself (added to st.App in app/frontends/streamlit/web.py).

GET /preview answers one small page whose script reads the source from the URL's fragment (which never reaches a
server) and draws it: an HTML page or an SVG picture as a document of its own, a Mermaid diagram with the Mermaid
library that GET /preview/mermaid.js serves from this machine (`make setup` fetches it with npm; no CDN).

The page's own Content-Security-Policy header is what keeps a hostile answer inside its frame, whoever embeds or
opens it: `sandbox allow-scripts` gives the document an opaque origin (no cookies, storage or DOM of the app; no
top navigation, pop-ups or forms), and `default-src 'none'` with `connect-src 'none'` lets it load nothing but the
Mermaid script from here (no fetch, image, font or frame from anywhere). The frame that shows it (frame.py) is
sandboxed without allow-same-origin too, and the app's own policy (csp.py) still stops it navigating elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from app.config import mermaid_script

PATH = "/preview"

POLICY = "; ".join([
    "sandbox allow-scripts",
    "default-src 'none'",
    "script-src 'self' 'unsafe-inline'",  # the answer's own scripts run (inside the sandbox), and Mermaid's
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
])
_HEADERS = {"Content-Security-Policy": POLICY, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache"}

# Reads kind= and source= from the fragment. An HTML page or an SVG replaces this document (document.open keeps the
# policy above); a Mermaid diagram is drawn by the library with its strictest setting (no HTML labels, no clicks).
_SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Preview</title>
<style>body{margin:0;font:14px sans-serif} .problem{color:#b00;padding:1em;white-space:pre-wrap}</style>
</head><body><script>
(function () {
  var fragment = new URLSearchParams(location.hash.slice(1));
  var kind = fragment.get("kind"), source = fragment.get("source") || "";
  function problem(text) {
    var box = document.createElement("div"); box.className = "problem"; box.textContent = text;
    document.body.replaceChildren(box);
  }
  if (kind === "html" || kind === "svg") {
    document.open(); document.write(source); document.close();
  } else if (kind === "mermaid") {
    var script = document.createElement("script");
    script.src = "%(mermaid)s";
    script.onerror = function () {
      problem("The Mermaid library is not on this machine: run `make setup` (it fetches it with npm) and reload.");
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
  } else {
    problem("Nothing to preview.");
  }
})();
</script></body></html>
"""


async def _shell(request: Request) -> Response:
    return HTMLResponse(_SHELL % {"mermaid": f"{PATH}/mermaid.js"}, headers=_HEADERS)


async def _mermaid(request: Request) -> Response:
    path: Path = mermaid_script()
    if not path.is_file():
        return PlainTextResponse(f"Mermaid is not installed at {path}: run `make setup`.", status_code=404,
                                 headers=_HEADERS)
    return FileResponse(path, media_type="text/javascript",
                        headers={**_HEADERS, "Cache-Control": "public, max-age=86400"})


def routes() -> list[BaseRoute]:
    return [Route(PATH, _shell, methods=["GET"]), Route(f"{PATH}/mermaid.js", _mermaid, methods=["GET"])]
