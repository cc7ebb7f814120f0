"""The process's models for the pages: one ClientPool (app/clients/pool.py) per process, shared by every browser
session, holding the model picker's model (one at a time: switching backend or model releases the previous one, its
memory and its engine processes) and the Compare page's targets' models. Cleared (a new app version, the tests), the
pool closes them all."""

from __future__ import annotations

import streamlit as st

from app.clients.client_protocol import Client, ClientError
from app.clients.pool import ClientPool
from app.config import ModelSettings
from app.frontends.streamlit import endpoints
from app.frontends.streamlit.safe_markdown import safe_markdown

PICKER = "model picker"  # the pool's holder of the sidebar's model


@st.cache_resource(show_spinner=False, on_release=ClientPool.close)
def process_pool() -> ClientPool:
    """The models of this process, shared by every browser session."""
    return ClientPool()


def is_shared_loaded(settings: ModelSettings) -> bool:
    """Whether the model picker's model is loaded for these settings (without loading it)."""
    return process_pool().holds(PICKER, settings)


def load_client(settings: ModelSettings) -> Client | None:
    """The client for these settings, or None after showing why it could not be loaded."""
    if settings.backend == "openai":
        name = f"the API at {settings.api_base_url}"
        if problem := endpoints.base_url_problem(settings.api_base_url):
            st.error(safe_markdown(f"**Not connected.** {problem}"), icon=":material/error:")
            return None
    else:
        name = settings.model_path or "the embedded SmolLM2-135M-Instruct"
        if settings.backend == "vllm":
            name += " in vLLM (starting the engine takes 30 s or more)"
    try:
        with st.spinner(f"Connecting to {name}..." if settings.backend == "openai"
                        else f"Loading {name}... (first load of a model takes a while)"):
            return process_pool().hold(PICKER, settings)
    except ClientError as exc:
        st.error(safe_markdown(f"**Model not loaded.** {exc}"), icon=":material/error:")
    except Exception as exc:  # never let a loader bug take the page down
        st.error(safe_markdown(f"**Model not loaded** ({type(exc).__name__}): {exc}"), icon=":material/error:")
    return None
