"""The models the Compare page answers with. A target on the model picker's settings shares the client every page
uses; any other target's model is loaded into the same pool, the process's (app/frontends/streamlit/client_cache.py),
so that two tabs comparing the same models load them once (a model is one however its folder is spelled:
app/clients/pool.py's model_identity). Before a model is loaded its memory is checked against what is
loaded already (app/clients/memory_fit.py), at the send and again by the pool as it loads: a target that would not fit
is refused with the figures, never loaded until the machine swaps. The sidebar lists what is loaded, with its
estimated memory and an Unload button."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from app.clients.client_protocol import Client, ClientError
from app.clients.memory_fit import DoesNotFit, check_fit, describe_bytes, free_bytes, need_for
from app.clients.pool import ClientPool, model_identity
from app.compare.targets import Target
from app.config import ModelSettings
from app.frontends.streamlit import sidebar
from app.frontends.streamlit.client_cache import PICKER, is_shared_loaded, process_pool
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown


class ModelsFor:
    """Which client answers for which settings, in one run of the page: the model picker's (`shared`, loaded by
    the page as every page loads it, or None when it failed) for its settings, the pool's for any other. Called on
    the targets' threads: a pool model loads there, without holding up the targets whose model is loaded (its memory
    checked beside every model the pool holds, the picker's included)."""

    def __init__(self, shared_settings: ModelSettings, shared: Client | None) -> None:
        self.shared_settings = shared_settings
        self.shared = shared
        self.pool = process_pool()

    def is_shared(self, settings: ModelSettings) -> bool:
        """Whether `settings` name the picker's model (its folder spelled any way)."""
        return model_identity(settings) == model_identity(self.shared_settings)

    def __call__(self, settings: ModelSettings) -> Client:
        if self.is_shared(settings):
            if self.shared is None:
                raise ClientError("the model picker's model did not load (the page says why above)")
            return self.shared
        return self.pool.get(settings)

    def loaded(self) -> set[ModelSettings]:
        """The models loaded, by identity (model_identity): the picker's and the targets'."""
        return set(self.pool.loaded())


def check_memory(targets: Sequence[Target], models: ModelsFor) -> str | None:
    """Why these targets cannot all be loaded (the figures: what they need, what is free), or None when they fit."""
    try:
        check_fit([model_identity(target.settings) for target in targets], models.loaded())
    except DoesNotFit as exc:
        return str(exc)
    return None


def render_loaded(models: ModelsFor, busy: bool) -> None:
    """In the sidebar: the models loaded for the page, each with its estimated memory, and the free memory. Unload
    frees a target's model (not the picker's; not while this tab's comparison runs)."""
    st.markdown("**Loaded models**")
    shown = False
    if is_shared_loaded(models.shared_settings):
        need = need_for(models.shared_settings)
        st.caption(safe_markdown(f"{sidebar.model_name(models.shared_settings)} · {_size(need.bytes)} "
                                 f"{need.where} · the model picker's, shared with every page"), help=need.detail)
        shown = True
    for index, settings in enumerate(s for s in models.pool.loaded() if not models.pool.holds(PICKER, s)):
        need = need_for(settings)
        text, button = st.columns([4, 1], vertical_alignment="center")
        text.caption(safe_markdown(f"{sidebar.model_name(settings)} · {settings.backend} · {_size(need.bytes)} "
                                   f"{need.where}"), help=need.detail)
        button.button("", icon=":material/eject:", key=f"compare_unload/{index}", disabled=busy,
                      help=safe_label(f"Unload {sidebar.model_name(settings)} and free its memory"),
                      on_click=_unload, args=(models.pool, settings))
        shown = True
    if not shown:
        st.caption("None yet: a target's model loads when you send.")
    ram = free_bytes("RAM")
    gpu = free_bytes("GPU")
    free = [f"RAM {describe_bytes(ram)}" if ram is not None else "", f"GPU {describe_bytes(gpu)}" if gpu else ""]
    st.caption("Free: " + ", ".join(part for part in free if part))


def _unload(loaded: ClientPool, settings: ModelSettings) -> None:
    loaded.unload(settings)


def _size(value: int | None) -> str:
    return f"≈ {describe_bytes(value)}" if value is not None else "size unknown"
