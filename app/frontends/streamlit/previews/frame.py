"""Showing an answer's previews: a Preview button beside Copy opens a dialog with one frame per HTML, SVG or
Mermaid block (blocks.py).

The frame Streamlit draws (st.iframe, whose sandbox allows same-origin scripts) holds no script of ours: only an
inner frame, sandboxed with allow-scripts alone, that loads the preview page (route.py) with the source in its URL's
fragment. Both that sandbox and the page's own policy give the preview an opaque origin and no network.
"""

from __future__ import annotations

import html
from urllib.parse import quote

import streamlit as st

from app.frontends.streamlit.previews.blocks import MAX_SOURCE_CHARS, Preview, previews_in
from app.frontends.streamlit.previews.route import PATH

FRAME_HEIGHT = 460


def preview_button(text: str, key: str) -> None:
    """A Preview button when `text` has something to preview; it opens the previews in a dialog."""
    previews = previews_in(text)
    if previews:
        st.button("Preview", key=key, icon=":material/preview:", type="tertiary", on_click=_open, args=(previews,),
                  help="Draw the answer's HTML, SVG or Mermaid code, in a frame that cannot reach the app or the "
                  "network")


def _open(previews: list[Preview]) -> None:
    _dialog(previews)


@st.dialog("Preview", width="large")
def _dialog(previews: list[Preview]) -> None:
    st.caption(":material/shield: Drawn in a sandbox: its scripts run, but cannot reach this app, your cookies or "
               "the network.")
    if len(previews) == 1:
        show(previews[0])
        return
    for tab, preview in zip(st.tabs([p.title for p in previews]), previews, strict=True):
        with tab:
            show(preview)


def show(preview: Preview) -> None:
    """One preview in its frame, or why it cannot be shown."""
    if preview.too_large:
        st.warning(f"This block has {len(preview.source):,} characters; previews draw up to {MAX_SOURCE_CHARS:,}. "
                   "Copy it into a file to open it.", icon=":material/warning:")
        return
    st.iframe(frame_html(preview), height=FRAME_HEIGHT)


def frame_html(preview: Preview) -> str:
    """The outer frame's document: no script, one sandboxed frame on the preview page."""
    fragment = f"kind={preview.kind}&source={quote(preview.source, safe='')}"
    src = html.escape(f"{PATH}#{fragment}", quote=True)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><style>html,body{margin:0;height:100%}"
            "iframe{border:1px solid #ddd;border-radius:6px;width:100%;height:100%;box-sizing:border-box;"
            f"background:#fff}}</style></head><body><iframe sandbox=\"allow-scripts\" src=\"{src}\" "
            f"title=\"{html.escape(preview.title, quote=True)}\" referrerpolicy=\"no-referrer\"></iframe>"
            "</body></html>")
