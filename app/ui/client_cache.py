"""One loaded backend per process, shared by every browser session, released when the settings change."""

from __future__ import annotations

import streamlit as st

from app.clients.base import Client, ClientError
from app.clients.registry import create_client
from app.config import ModelSettings


def _release(client: Client) -> None:
    client.close()


@st.cache_resource(max_entries=1, show_spinner=False, on_release=_release)
def _cached_client(backend: str, model_path: str, device: str, dtype: str, max_context_tokens: int) -> Client:
    settings = ModelSettings(backend, model_path, device, dtype, max_context_tokens)
    return create_client(settings)


def load_client(settings: ModelSettings) -> Client | None:
    """The client for these settings, or None after showing why it could not be loaded."""
    name = settings.model_path or "the embedded SmolLM2-135M-Instruct"
    try:
        with st.spinner(f"Loading {name}... (first load of a model takes a while)"):
            return _cached_client(
                settings.backend, settings.model_path, settings.device, settings.dtype, settings.max_context_tokens
            )
    except ClientError as exc:
        st.error(f"**Model not loaded.** {exc}", icon=":material/error:")
    except Exception as exc:  # never let a loader bug take the page down
        st.error(f"**Model not loaded** ({type(exc).__name__}): {exc}", icon=":material/error:")
    return None
