"""Pictures as the page shows them (app/frontends/streamlit/shown_images.py): a picture wider than st.image's
content width is fitted once per session, not scaled and re-encoded by st.image on every run."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _script() -> None:
    import io

    import streamlit as st
    from PIL import Image

    from app.frontends.streamlit import shown_images

    def picture(width: int, height: int, form: str) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (width, height), (200, 120, 40)).save(out, form)
        return out.getvalue()

    wide, narrow, tall = picture(3000, 1000, "JPEG"), picture(800, 600, "PNG"), picture(600, 2400, "PNG")
    first = shown_images.shown(wide)
    fitted = Image.open(io.BytesIO(first))
    st.session_state["result"] = {
        "wide": (fitted.size, fitted.format), "made once": shown_images.shown(wide) is first,
        "narrow as it is": shown_images.shown(narrow) is narrow, "tall as it is": shown_images.shown(tall) is tall,
        "not a picture": shown_images.shown(b"not a picture") == b"not a picture",
    }
    st.image(first)


def test_a_wide_picture_is_fitted_once_and_others_are_shown_as_they_are():
    at = AppTest.from_function(_script).run()
    assert not at.exception
    assert at.session_state["result"] == {"wide": ((1460, 487), "JPEG"), "made once": True, "narrow as it is": True,
                                          "tall as it is": True, "not a picture": True}
