"""The sidebar's sampling sliders, started from the model's own defaults (app/clients/generation_defaults.py).

Switching model or backend re-derives every slider the user has not moved away from the previous model's default;
"Reset to model defaults" puts all of them back. The widgets take their values from st.session_state only (never
also a `value=`), which is what lets this module set them before they are drawn.
"""

from __future__ import annotations

from typing import TypedDict

import streamlit as st

from app.clients.generation_defaults import SAMPLING_FIELDS, GenerationDefaults
from app.frontends.streamlit.safe_markdown import safe_markdown

_APPLIED_KEY = "_sampling_defaults_applied"  # the defaults the sliders were last derived from
_CHOSEN_KEY = "_sampling_chosen"  # fields a preset set: sent to a server even when equal to our guess of its default
# The widgets' ranges; a model default outside one is clamped into it (Streamlit refuses such a value).
_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.05, 1.0), "top_k": (0, 500), "repetition_penalty": (1.0, 2.0)}


class SamplingValues(TypedDict):
    """The sliders' values, as GenerationParams takes them, and which of them are left to an API server."""

    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    server_defaults: list[str]


def _in_range(name: str, value: float | int) -> float | int:
    low, high = _RANGES[name]
    return min(max(value, low), high)


def _derive(defaults: GenerationDefaults) -> None:
    applied: dict | None = st.session_state.get(_APPLIED_KEY)
    if applied == defaults.values:
        return
    for name in SAMPLING_FIELDS:
        # Without defaults applied before, a value already there is the user's (restored by
        # app/frontends/streamlit/preferences.py).
        untouched = applied is not None and st.session_state.get(name) == applied.get(name)
        if name not in st.session_state or untouched:
            st.session_state[name] = _in_range(name, defaults.values[name])
    st.session_state[_APPLIED_KEY] = dict(defaults.values)


def _reset(defaults: GenerationDefaults) -> None:
    st.session_state[_CHOSEN_KEY] = []
    for name in SAMPLING_FIELDS:
        st.session_state[name] = _in_range(name, defaults.values[name])
    st.session_state[_APPLIED_KEY] = dict(defaults.values)


def render(defaults: GenerationDefaults, server_decides: bool = False) -> SamplingValues:
    """Draw the sliders; return the values in use. `server_decides` (an OpenAI-compatible server): the values the
    user has not changed are not sent, so the server applies its model's own defaults, as for any API client."""
    _derive(defaults)
    temperature = st.slider("Temperature", *_RANGES["temperature"], step=0.05, key="temperature",
                            help="0 picks the most likely token every time (greedy).")
    top_p = st.slider("Top p", *_RANGES["top_p"], step=0.05, key="top_p")
    top_k = st.number_input("Top k", *_RANGES["top_k"], step=5, key="top_k", help="0 turns the top-k cut off.")
    repetition_penalty = st.slider("Repetition penalty", *_RANGES["repetition_penalty"], step=0.05,
                                   key="repetition_penalty")
    chosen = {"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k),
              "repetition_penalty": float(repetition_penalty)}
    picked = set(st.session_state.get(_CHOSEN_KEY) or [])
    untouched = [name for name in SAMPLING_FIELDS
                 if chosen[name] == _in_range(name, defaults.values[name]) and name not in picked]
    changed = [name.replace("_", " ") for name in SAMPLING_FIELDS if name not in untouched]
    values = SamplingValues(temperature=chosen["temperature"], top_p=chosen["top_p"], top_k=int(chosen["top_k"]),
                            repetition_penalty=chosen["repetition_penalty"],
                            server_defaults=untouched if server_decides else [])
    if server_decides:
        note = ("The server's defaults for its model: the sliders you leave alone are not sent (they start from "
                f"{defaults.describe()}).")
    else:
        note = f"Model defaults: {defaults.describe()}."
    if changed:
        note += f" Changed by you: {', '.join(changed)}."
    st.caption(safe_markdown(note))  # the model's files wrote part of it
    st.button("Reset to model defaults", on_click=_reset, args=(defaults,), key="reset_sampling",
              disabled=not changed, width="stretch")
    return values


def set_values(defaults: GenerationDefaults, values: dict[str, float | int]) -> None:
    """Put these values into the sliders (before they are drawn), for a model whose defaults are `defaults`: taken
    as the user's choice, not re-derived when the model changes to that one."""
    for name in SAMPLING_FIELDS:
        st.session_state[name] = _in_range(name, values[name])
    st.session_state[_APPLIED_KEY] = dict(defaults.values)


def choose(values: dict[str, float | int]) -> None:
    """Put these values (some of the sampling fields) into the sliders before they are drawn, as the user's choice
    (a preset applied): kept when the model changes, where an untouched slider follows the new model's default."""
    applied = dict(st.session_state.get(_APPLIED_KEY) or {})
    for name, value in values.items():
        st.session_state[name] = _in_range(name, value)
        applied[name] = None  # no default equals it: _derive sees the user's value
    st.session_state[_APPLIED_KEY] = applied
    st.session_state[_CHOSEN_KEY] = sorted(set(st.session_state.get(_CHOSEN_KEY) or []) | set(values))
