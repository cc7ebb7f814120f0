"""Pictures as the page shows them, made once per browser session.

Given bytes, st.image scales a picture wider than its content width (1,460 px) and re-encodes it (JPEG at quality
90) on every run, and re-encodes any format but PNG and JPEG likewise: a few wide photos in a conversation cost
that on every click and send. The page therefore hands it a version that already fits, made the first time a
picture is drawn and kept in this session's state (keyed by the picture's hash, a bounded number of them).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import replace

import streamlit as st
from PIL import Image

from app.config import ImageSettings
from app.domain.media import ImageError, prepare_image

SHOWN_WIDTH = 1460  # st.image's widest: streamlit.elements.lib.image_utils.MAXIMUM_CONTENT_WIDTH
_KEPT = 64  # pictures kept per session; the oldest goes first
_STATE_KEY = "_shown_images"


def shown(data: bytes) -> bytes:
    """`data` (a stored picture: PNG or JPEG, made safe when it was attached) as st.image can show it unchanged."""
    kept: dict[str, bytes] = st.session_state.setdefault(_STATE_KEY, {})
    key = hashlib.sha256(data).hexdigest()
    if key not in kept:
        if len(kept) >= _KEPT:
            del kept[next(iter(kept))]
        kept[key] = _fitted(data)
    return kept[key]


def _fitted(data: bytes) -> bytes:
    try:
        with Image.open(io.BytesIO(data)) as probe:  # reads the header only
            fits = probe.width <= SHOWN_WIDTH and probe.format in ("PNG", "JPEG")
        if fits:
            return data
        settings = replace(ImageSettings.from_env(), max_side=SHOWN_WIDTH)
        return prepare_image(data, settings=settings).data
    except (OSError, ImageError):  # not a picture Pillow reads: st.image says so, as it did before
        return data
