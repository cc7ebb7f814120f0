"""The Streamlit app's one script body: the shared sidebar, then the selected page. app/main.py runs it on every
rerun (`streamlit run app/main.py`); app/frontends/streamlit/web.py serves it with a Content-Security-Policy."""


from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.config import offline_by_default
from app.frontends.streamlit import history, mcp_sign_in, persistence, sidebar, state
from app.frontends.streamlit.tool_settings import KEPT_PREFIX
from app.telemetry.setup import configure_tracing


def run() -> None:
    """Draws one run of the app: page config, navigation, the saved conversation, the sidebar, then the page."""
    offline_by_default()
    configure_tracing(timelines=True)  # once per process: the answers' timelines, and OTLP export where asked
    # An emoji icon is drawn in the browser; a :material/...: one is fetched from fonts.gstatic.com on every load.
    st.set_page_config(page_title="Composite LLM demo", page_icon="💬", layout="wide")

    # Not "pages/": Streamlit treats a pages/ folder next to the entry script as a legacy multipage app and, on a fresh
    # server, serves a deep link such as /tools as that file alone (no sidebar) until st.navigation
    # has run once.
    views_dir = Path(__file__).parent / "views"
    pages = {
        "chat": st.Page(views_dir / "chat.py", title="Chat", icon=":material/chat:",
                        default=True),
        "tools": st.Page(views_dir / "tools.py", title="Tools", icon=":material/build:"),
        "all_tools": st.Page(views_dir / "all_tools.py", title="All Tools",
                             icon=":material/handyman:"),
        "compare": st.Page(views_dir / "compare.py", title="Compare",
                           icon=":material/view_column:"),
        "knowledge": st.Page(views_dir / "knowledge.py", title="Knowledge", icon=":material/library_books:"),
        "evals": st.Page(views_dir / "evals.py", title="Evals", icon=":material/fact_check:"),
        "models": st.Page(views_dir / "models.py", title="Models", icon=":material/neurology:"),
    }
    # Streamlit forgets a widget's value when a run does not draw it; keep page settings across page switches.
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(KEPT_PREFIX)]:
        st.session_state[key] = st.session_state[key]
    current = st.navigation(list(pages.values()))
    page_name = next(name for name, page in pages.items() if page.url_path == current.url_path)
    state.wait_for_interrupted_turn()  # a Stop (or any click) during a turn: the answer so far is recorded first
    conversation = state.conversation(page_name)
    persistence.open_from_url(page_name, conversation)  # a refresh or a link reopens the saved conversation
    persistence.save(page_name, conversation)  # what the last run changed (a stopped answer, Regenerate, Resend)
    mcp_sign_in.finish_from_url()  # back from an MCP server's sign-in page, with ?code=...&state=...
    sidebar.render(page_name)
    if page_name not in ("compare", "knowledge", "models", "evals"):  # Compare's panes are not one conversation
        history.render(page_name, conversation)
    current.run()
