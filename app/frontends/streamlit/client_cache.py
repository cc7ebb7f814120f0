"""One loaded backend per process, shared by every browser session, released when the settings change."""

from __future__ import annotations

import threading

import streamlit as st

from app.clients.backends import create_client
from app.clients.client_protocol import Client, ClientError
from app.config import ModelSettings
from app.frontends.streamlit import endpoints
from app.frontends.streamlit.safe_markdown import safe_markdown


class _Loaded:
    """Which settings the cached client was loaded for (the Compare page counts its memory and shares it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clients: dict[ModelSettings, Client] = {}


@st.cache_resource(show_spinner=False)
def _loaded() -> _Loaded:
    return _Loaded()


def _release(client: Client) -> None:
    loaded = _loaded()
    with loaded.lock:
        for settings in [s for s, c in loaded.clients.items() if c is client]:
            del loaded.clients[settings]
    client.close()


@st.cache_resource(max_entries=1, show_spinner=False, on_release=_release)
def _cached_client(settings: ModelSettings) -> Client:
    # One entry: switching backend or model releases the previous one (its memory, its engine processes).
    client = create_client(settings)
    loaded = _loaded()
    with loaded.lock:
        loaded.clients[settings] = client
    return client


def is_shared_loaded(settings: ModelSettings) -> bool:
    """Whether the shared client is loaded for these settings (without loading it)."""
    loaded = _loaded()
    with loaded.lock:
        return settings in loaded.clients


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
            return _cached_client(settings)
    except ClientError as exc:
        st.error(safe_markdown(f"**Model not loaded.** {exc}"), icon=":material/error:")
    except Exception as exc:  # never let a loader bug take the page down
        st.error(safe_markdown(f"**Model not loaded** ({type(exc).__name__}): {exc}"), icon=":material/error:")
    return None
