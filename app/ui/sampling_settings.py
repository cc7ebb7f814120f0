"""The sidebar's sampling sliders, started from the model's own defaults (app/generation_defaults.py).

Switching model or backend re-derives every slider the user has not moved away from the previous model's default;
"Reset to model defaults" puts all of them back. The widgets take their values from st.session_state only (never
also a `value=`), which is what lets this module set them before they are drawn.
"""

from __future__ import annotations

from typing import TypedDict

import streamlit as st

from app.generation_defaults import SAMPLING_FIELDS, GenerationDefaults
from app.ui.safe_markdown import safe_markdown

_APPLIED_KEY = "_sampling_defaults_applied"  # the defaults the sliders were last derived from
# The widgets' ranges; a model default outside one is clamped into it (Streamlit refuses such a value).
_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.05, 1.0), "top_k": (0, 500), "repetition_penalty": (1.0, 2.0)}


class SamplingValues(TypedDict):
    """The sliders' values, as GenerationParams takes them."""

    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float


def _in_range(name: str, value: float | int) -> float | int:
    low, high = _RANGES[name]
    return min(max(value, low), high)


def _derive(defaults: GenerationDefaults) -> None:
    applied: dict | None = st.session_state.get(_APPLIED_KEY)
    if applied == defaults.values:
        return
    for name in SAMPLING_FIELDS:
        untouched = applied is None or st.session_state.get(name) == applied.get(name)
        if name not in st.session_state or untouched:
            st.session_state[name] = _in_range(name, defaults.values[name])
    st.session_state[_APPLIED_KEY] = dict(defaults.values)


def _reset(defaults: GenerationDefaults) -> None:
    for name in SAMPLING_FIELDS:
        st.session_state[name] = _in_range(name, defaults.values[name])
    st.session_state[_APPLIED_KEY] = dict(defaults.values)


def render(defaults: GenerationDefaults) -> SamplingValues:
    """Draw the sliders; return the values in use."""
    _derive(defaults)
    temperature = st.slider("Temperature", *_RANGES["temperature"], step=0.05, key="temperature",
                            help="0 picks the most likely token every time (greedy).")
    top_p = st.slider("Top p", *_RANGES["top_p"], step=0.05, key="top_p")
    top_k = st.number_input("Top k", *_RANGES["top_k"], step=5, key="top_k", help="0 turns the top-k cut off.")
    repetition_penalty = st.slider("Repetition penalty", *_RANGES["repetition_penalty"], step=0.05,
                                   key="repetition_penalty")
    values = SamplingValues(temperature=float(temperature), top_p=float(top_p), top_k=int(top_k),
                            repetition_penalty=float(repetition_penalty))
    changed = [name.replace("_", " ") for name in SAMPLING_FIELDS
               if values.get(name) != _in_range(name, defaults.values[name])]
    note = f"Model defaults: {defaults.describe()}."
    if changed:
        note += f" Changed by you: {', '.join(changed)}."
    st.caption(safe_markdown(note))  # the model's files wrote part of it
    st.button("Reset to model defaults", on_click=_reset, args=(defaults,), key="reset_sampling",
              disabled=not changed, width="stretch")
    return values
