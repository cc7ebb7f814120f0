"""Showing an answer's previews: a Preview button beside Copy opens a dialog with one frame per HTML, SVG or
Mermaid block (blocks.py).

The frame Streamlit draws (st.iframe, whose own sandbox allows same-origin scripts) holds no script of ours, only an
inner frame sandboxed without allow-same-origin:
- an HTML page or an SVG picture is drawn with no script at all (`sandbox=""`, from srcdoc, with a policy of its
  own that loads nothing but data: pictures and fonts). The app's policy, which srcdoc frames inherit, also keeps
  its links from navigating anywhere else;
- a page's scripts run only when the person turns them on for it: the frame then loads the app's HTML page
  (route.py), sandboxed with allow-scripts alone. The switch says what that allows: CSP cannot forbid WebRTC, which
  the page takes away from the scripts' window, but a script can get it back from a frame of its own;
- a Mermaid diagram is drawn by the library on the app's Mermaid page (route.py): the diagram's text runs nothing.
"""

from __future__ import annotations

import html
from urllib.parse import quote

import streamlit as st

from app.frontends.streamlit.previews.blocks import Preview, previews_in
from app.frontends.streamlit.previews.route import MERMAID_PATH, PATH

FRAME_HEIGHT = 460
MAX_URL_CHARS = 1_000_000  # what a script-run page or a diagram may take in its frame's URL (Firefox's cap is ~1 MB)
# The static frame's own policy: nothing loads but what the block carries in itself.
_STATIC_POLICY = ("default-src 'none'; img-src data: blob:; media-src data: blob:; font-src data:; "
                  "style-src 'unsafe-inline'")
_FRAME_STYLE = ("<style>html,body{margin:0;height:100%}iframe{border:1px solid #ddd;border-radius:6px;width:100%;"
                "height:100%;box-sizing:border-box;background:#fff}</style>")


def preview_button(texts: list[str], key: str) -> None:
    """A Preview button when the answer's messages (`texts`, each parsed as the page renders it) have something to
    preview; it opens the previews in a dialog."""
    found: list[Preview] = []
    for text in texts:
        found.extend(previews_in(text, first_number=len(found) + 1))
    if found:
        st.button("Preview", key=key, icon=":material/preview:", type="tertiary", on_click=_open, args=(found, key),
                  help="Draw the answer's HTML, SVG or Mermaid code, in a frame that cannot reach the app")


def _open(previews: list[Preview], key: str) -> None:
    _dialog(previews, key)


@st.dialog("Preview", width="large")
def _dialog(previews: list[Preview], key: str) -> None:
    st.caption(":material/shield: Drawn in a sandbox that cannot reach this app, your cookies or the network. Pages "
               "are drawn without their scripts unless you turn them on.")
    if len(previews) == 1:
        show(previews[0], f"{key}/1")
        return
    for tab, preview in zip(st.tabs([p.title for p in previews]), previews, strict=True):
        with tab:
            show(preview, f"{key}/{preview.number}")


def show(preview: Preview, key: str) -> None:
    """One preview in its frame, or why it cannot be shown."""
    scripts = False
    if preview.kind == "html" and preview.has_script:
        scripts = st.toggle("Run the page's scripts", key=f"{key}/scripts", help=(
            "Its scripts run in a sandbox with no access to this app or your cookies, and its policy stops their "
            "requests. WebRTC, which no policy governs, is taken away from the page, but a determined script can "
            "get it back through a frame of its own and reach the network: run only a page you would open in a "
            "browser tab."))
    if (scripts or preview.kind == "mermaid") and len(_fragment(preview)) > MAX_URL_CHARS:
        st.warning("This block is too large to preview with scripts: copy it into a file to open it.",
                   icon=":material/warning:")
        return
    st.iframe(frame_html(preview, scripts), height=FRAME_HEIGHT)


def _fragment(preview: Preview) -> str:
    return f"source={quote(preview.source, safe='')}"


def frame_html(preview: Preview, scripts: bool = False) -> str:
    """The outer frame's document: no script, one sandboxed frame with the preview."""
    title = html.escape(preview.title, quote=True)
    if preview.kind == "mermaid" or (scripts and preview.kind == "html"):
        page = MERMAID_PATH if preview.kind == "mermaid" else PATH
        src = html.escape(f"{page}#{_fragment(preview)}", quote=True)
        inner = f'<iframe sandbox="allow-scripts" src="{src}" title="{title}" referrerpolicy="no-referrer"></iframe>'
    else:
        document = (f'<!doctype html><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                    f'content="{_STATIC_POLICY}">' + preview.source)
        inner = f'<iframe sandbox="" srcdoc="{html.escape(document, quote=True)}" title="{title}"></iframe>'
    return f'<!doctype html><html><head><meta charset="utf-8">{_FRAME_STYLE}</head><body>{inner}</body></html>'
