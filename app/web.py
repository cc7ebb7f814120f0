"""The app as `make run` serves it: `streamlit run app/web.py` runs app/main.py with a Content-Security-Policy on
every response (app/ui/csp.py), through st.App, Streamlit's ASGI app, since its server has no header setting."""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run app/web.py` puts app/ on sys.path, not the repository root that holds the `app` package.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app.ui.csp import ContentSecurityPolicy  # noqa: E402

app = st.App(Path(__file__).parent / "main.py", middleware=[Middleware(ContentSecurityPolicy)])
