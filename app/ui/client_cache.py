"""One loaded backend per process, shared by every browser session, released when the settings change."""

from __future__ import annotations

import streamlit as st

from app.clients.base import Client, ClientError
from app.clients.registry import create_client
from app.config import ModelSettings
from app.ui.safe_markdown import safe_markdown


def _release(client: Client) -> None:
    client.close()


@st.cache_resource(max_entries=1, show_spinner=False, on_release=_release)
def _cached_client(settings: ModelSettings) -> Client:
    # One entry: switching backend or model releases the previous one (its memory, its engine processes).
    return create_client(settings)


def load_client(settings: ModelSettings) -> Client | None:
    """The client for these settings, or None after showing why it could not be loaded."""
    if settings.backend == "openai":
        name = f"the API at {settings.api_base_url}"
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
