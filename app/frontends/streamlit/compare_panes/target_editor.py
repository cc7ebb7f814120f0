"""The Compare page's targets, edited in the sidebar: 2 to 4, each with a label, a backend and model, its sampling,
a system prompt and a tool choice. A new session starts with two ready to send: the file named by
DEMO_COMPARE_TARGETS (app/compare/targets.py's format) when it is set, else the model picker's model at its own
defaults and at another temperature (default_targets), which share one loaded engine.

The widgets' keys start with "settings." so that their values outlive a visit to another page (app/main.py)."""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from typing import Any

import streamlit as st

from app.clients.backends import BACKENDS
from app.clients.generation_defaults import defaults_for_settings
from app.compare.targets import (
    MAX_TARGETS,
    Target,
    TargetsError,
    check_targets,
    default_targets,
    load_targets,
    model_label,
)
from app.config import ModelSettings
from app.domain.generation_params import SAMPLING_FIELDS
from app.frontends.streamlit import api_keys, endpoints
from app.frontends.streamlit.safe_markdown import safe_label

TARGETS_FILE_ENV = "DEMO_COMPARE_TARGETS"
MIN_TARGETS = 2
_SLOTS = "_compare_slots"  # the targets' slot numbers, in order (a slot keeps its widgets' keys when one is removed)
_NOTICE = "_compare_targets_notice"
_PREFIX = "settings.compare.target"
_PAGE_CHOICE = "the page's"  # tool choice: whatever the Tool choice selector says


def _key(slot: int, name: str) -> str:
    return f"{_PREFIX}{slot}.{name}"


def starting_targets(picker: ModelSettings) -> list[Target]:
    """The targets a new session starts with (see the module's docstring)."""
    path = os.environ.get(TARGETS_FILE_ENV, "").strip()
    if path:
        try:
            return load_targets(path, picker)
        except TargetsError as exc:
            st.session_state[_NOTICE] = f"{TARGETS_FILE_ENV} was not used: {exc}"
    return default_targets(picker)


def _fill(slot: int, target: Target) -> None:
    """Put a target's values into its slot's widgets."""
    settings, params = target.settings, target.params
    values: dict[str, Any] = {
        "label": target.label, "backend": settings.backend, "model_path": settings.model_path,
        "api_base_url": settings.api_base_url, "api_model": settings.api_model,
        "temperature": float(params.temperature), "top_p": float(params.top_p),
        "max_new_tokens": int(params.max_new_tokens), "seed": params.seed, "system_prompt": target.system_prompt,
        "tool_choice": target.tool_choice or _PAGE_CHOICE,
    }
    for name, value in values.items():
        st.session_state[_key(slot, name)] = value
    api_keys.hold(_key(slot, "api_key"), settings.api_base_url, settings.api_key)  # never sent to the browser


def _slots(picker: ModelSettings) -> list[int]:
    if _SLOTS not in st.session_state:
        reset(picker)
    return st.session_state[_SLOTS]


def reset(picker: ModelSettings) -> None:
    """Back to the starting targets."""
    targets = starting_targets(picker)
    st.session_state[_SLOTS] = list(range(len(targets)))
    for slot, target in enumerate(targets):
        _fill(slot, target)


def _add(picker: ModelSettings) -> None:
    slots = st.session_state[_SLOTS]
    slot = next(n for n in itertools.count() if n not in slots)
    own = default_targets(picker)[0]
    used = {str(st.session_state.get(_key(s, "label"), "")) for s in slots}
    label = next(label for n in itertools.count(len(slots) + 1)
                 if (label := f"{model_label(picker)} · target {n}") not in used)
    _fill(slot, replace(own, label=label))
    slots.append(slot)


def _remove(slot: int) -> None:
    st.session_state[_SLOTS].remove(slot)


def render(picker: ModelSettings, tool_names: list[str], locked: bool) -> tuple[list[Target], str | None]:
    """Draw the targets' settings (in the sidebar section the caller opened); the targets, and why they cannot be
    used if they cannot (a label used twice, a setting out of range). `locked`: a comparison is running, so
    nothing can change."""
    slots = _slots(picker)
    notice = st.session_state.pop(_NOTICE, None)
    if notice:
        st.warning(safe_label(notice), icon=":material/warning:")
    targets: list[Target] = []
    problem = None
    for position, slot in enumerate(slots):
        try:
            targets.append(_target(slot, position, picker, tool_names, locked, removable=len(slots) > MIN_TARGETS))
        except (ValueError, TargetsError) as exc:
            problem = problem or f"Target {position + 1}: {exc}"
    row = st.columns(2)
    row[0].button("Add target", icon=":material/add:", key="compare_add_target", on_click=_add, args=(picker,),
                  disabled=locked or len(slots) >= MAX_TARGETS, width="stretch",
                  help=f"Up to {MAX_TARGETS} targets side by side.")
    row[1].button("Reset", icon=":material/restart_alt:", key="compare_reset_targets", on_click=reset,
                  args=(picker,), disabled=locked, width="stretch",
                  help="Back to the two starting targets: the model picker's model at its defaults and at another "
                       "temperature (or the targets file the app was started with).")
    if problem is None:
        try:
            check_targets(targets)
        except TargetsError as exc:
            problem = str(exc)
    return targets, problem


def _target(slot: int, position: int, picker: ModelSettings, tool_names: list[str], locked: bool,
            removable: bool) -> Target:
    label = str(st.session_state.get(_key(slot, "label")) or f"Target {position + 1}")
    with st.expander(safe_label(f"{position + 1}. {label}"), expanded=False):
        label = st.text_input("Label", key=_key(slot, "label"), max_chars=80, disabled=locked,
                              help="Names the target in the panes, the votes and the leaderboard.").strip()
        backend = st.selectbox("Backend", list(BACKENDS), key=_key(slot, "backend"), disabled=locked,
                               format_func=lambda name: BACKENDS[name].label)
        settings = _model(slot, backend, picker, locked)
        defaults = defaults_for_settings(settings)
        temperature = st.number_input("Temperature", 0.0, 5.0, step=0.1, key=_key(slot, "temperature"),
                                      disabled=locked, help="0: greedy.")
        top_p = st.number_input("Top p", 0.01, 1.0, step=0.05, key=_key(slot, "top_p"), disabled=locked)
        max_new_tokens = st.number_input("Max new tokens", 1, 32768, step=64, key=_key(slot, "max_new_tokens"),
                                         disabled=locked)
        seed = st.number_input("Seed", 0, 2**32 - 1, step=1, key=_key(slot, "seed"), disabled=locked,
                               placeholder="random", help="The same seed gives the same answer again. Empty: a new "
                               "draw each time.")
        system_prompt = st.text_area("System prompt", key=_key(slot, "system_prompt"), disabled=locked,
                                     placeholder="Empty: the model's own default")
        choices = [_PAGE_CHOICE, "auto", "none", "required", *tool_names]
        chosen = st.session_state.get(_key(slot, "tool_choice"))
        if isinstance(chosen, str) and chosen not in choices:
            # A tool that is not on (Tools off, or switched off): kept, so that the pane says so when it answers
            # instead of answering without the tool it was meant to call.
            choices.append(chosen)
        tool_choice = st.selectbox("Tool choice", choices, key=_key(slot, "tool_choice"), disabled=locked,
                                   help="With tools on: the page's Tool choice, or this target's own.")
        st.button("Remove", icon=":material/delete:", key=f"compare_remove_target/{slot}", on_click=_remove,
                  args=(slot,), disabled=locked or not removable)
    shown = {"temperature", "top_p"}
    # A remote server applies its model's own defaults to what the target does not show (as the sidebar does).
    extra: dict[str, Any] = ({"server_defaults": frozenset(SAMPLING_FIELDS) - shown}
                             if settings.backend == "openai" else {})
    params = replace(defaults.params(temperature=float(temperature), top_p=float(top_p)),
                     max_new_tokens=int(max_new_tokens), seed=None if seed is None else int(seed), **extra)
    return Target(label, settings, params, system_prompt,
                  None if tool_choice == _PAGE_CHOICE else str(tool_choice))


def _model(slot: int, backend: str, picker: ModelSettings, locked: bool) -> ModelSettings:
    """The target's model over the picker's settings (device, precision, engine options): the same backend and
    model as the picker make the same settings, so the two share the loaded engine."""
    if backend == "openai":
        base_url = st.text_input("API base URL", key=_key(slot, "api_base_url"), disabled=locked,
                                 help="Any OpenAI-compatible server (`make serve`, `vllm serve`, llama-server...).")
        api_key = api_keys.key_input("API key", _key(slot, "api_key"), base_url, disabled=locked)
        api_model = st.text_input("Model", key=_key(slot, "api_model"), disabled=locked,
                                  placeholder="empty: the server's first model")
        if not base_url.strip().startswith(("http://", "https://")):
            raise ValueError(f"the API base URL must be an http(s) URL, not {base_url.strip()!r}")
        if problem := endpoints.base_url_problem(base_url):
            raise ValueError(problem)
        return replace(picker, backend=backend, api_base_url=base_url.strip(), api_key=api_key,
                       api_model=api_model.strip())
    model_path = st.text_input("Model path", key=_key(slot, "model_path"), disabled=locked,
                               placeholder="empty: embedded SmolLM2-135M-Instruct",
                               help="A local model folder (a .gguf file for llama.cpp). Nothing is downloaded.")
    return replace(picker, backend=backend, model_path=model_path.strip())
