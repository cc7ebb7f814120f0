"""The app as `make run` serves it: `streamlit run app/frontends/streamlit/web.py` runs app/main.py with a
Content-Security-Policy on every response (app/frontends/streamlit/csp.py), through st.App, Streamlit's ASGI app, since
its server has no header setting. It also serves the page that previews of answers' HTML, SVG and Mermaid load
(app/frontends/streamlit/previews/route.py)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from app.frontends.streamlit.csp import ContentSecurityPolicy
from app.frontends.streamlit.previews import route

app = st.App(Path(__file__).parents[2] / "main.py", routes=route.routes(),
             middleware=[Middleware(ContentSecurityPolicy)])
