"""Presets in the Generation settings: pick one (the built-in ones, then the user's) and Apply it to the conversation
that is open (the next answer uses it) or to a new one; save the current settings as a preset, edit one, delete it,
export the user's presets as a file and import such a file.

Applying sets the widgets' values before they are drawn (an on_click callback). The sidebar's own settings are
redrawn with the fragment they live in; a preset that changes the model or the tools reruns the whole app, since
the model picker and the tool switches are outside it. Tools are switched on a tool page when it is next drawn
(app/frontends/streamlit/tool_settings.py takes them from `pending_tools`), since a page not shown yet has no
switches."""

from __future__ import annotations

import streamlit as st

from app.clients.choice import default_backend
from app.clients.generation_defaults import SAMPLING_FIELDS
from app.config import ModelSettings
from app.frontends.streamlit import api_keys, persistence, sampling_settings
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.presets.built_in import BUILT_IN
from app.presets.preset import Preset, PresetError, parse_preset, presets_file, read_presets_file
from app.storage.errors import StorageError
from app.storage.presets import PresetStore

PICK = "presets.pick"
_NOTICE = "_presets_notice"
_PROBLEM = "_presets_problem"
_FULL_RUN = "_presets_full_run"
_PENDING_TOOLS = "_presets_tools.{page}"
TOOL_PAGES = ("tools", "all_tools")
_THINKING_LABELS = {None: "Model default", True: "On", False: "Off"}
_MODEL_KEYS = {"model_path": "settings.model.model_path", "api_base_url": "settings.model.api_base_url",
               "api_model": "settings.model.api_model"}
_BACKEND_FIELDS = {"openai": ("api_base_url", "api_model")}  # the others: ("model_path",)
_API_KEY = "settings.model.api_key"


def store() -> PresetStore:
    """The presets on the conversations' database (StorageError while it cannot be opened)."""
    return persistence.store_of(PresetStore)


def pending_tools(page: str) -> list[str] | None:
    """The tools a preset applied since the page was last drawn switches on there (the others off); None: none."""
    tools = st.session_state.pop(_PENDING_TOOLS.format(page=page), None)
    return list(tools) if tools is not None else None


def full_run_started() -> None:
    """Called by every full run of the app, before the sidebar's fragment: it draws the model and tools a preset
    changed, so the fragment need not rerun the app (a rerun raised then would drop a message sent in that run)."""
    st.session_state.pop(_FULL_RUN, None)


def render(page: str) -> None:
    """The presets row at the top of the Generation settings (inside its fragment)."""
    if st.session_state.pop(_FULL_RUN, False):  # a fragment-only run: the model or tools changed outside it
        st.rerun(scope="app")
    owner = persistence.owner()
    mine: list[Preset] = []
    problem = ""
    if owner is not None:
        try:
            mine = store().list(owner)
        except StorageError as exc:
            problem = f"Your presets cannot be read now ({exc}); the built-in ones still apply."
    by_key = {f"built-in:{preset.name}": preset for preset in BUILT_IN} | {f"mine:{p.name}": p for p in mine}
    if st.session_state.get(PICK) not in by_key:  # through session state only: callbacks set it too
        st.session_state[PICK] = None
    picked_key = st.selectbox("Preset", list(by_key), key=PICK, placeholder="Choose a preset to apply",
                              format_func=lambda key: safe_label(_label(key, by_key[key])),
                              help="A system prompt and sampling settings, and maybe a model and tools, in one "
                                   "click. Apply one to this conversation or a new one.")
    picked = by_key.get(picked_key) if picked_key else None
    if picked is not None:
        shown = f"{picked.description} ({picked.summary()})" if picked.description else picked.summary()
        st.caption(safe_markdown(shown))  # what applying it changes, always: a shared preset may say anything
    row = st.container(horizontal=True)
    row.button("Apply", key="presets_apply", icon=":material/done:", disabled=picked is None, type="primary",
               on_click=_apply, args=(picked,) if picked is not None else (None,),
               help="Set the sidebar to this preset: the next answer uses it.")
    mine_picked = picked if picked_key and picked_key.startswith("mine:") else None
    with row.popover("Manage", icon=":material/bookmarks:", disabled=owner is None,
                     help="Save the settings below as a preset, update or delete yours, export or import them"
                          if owner is not None else "Sign in to save presets"):
        if owner is not None:
            _manage(owner, page, mine_picked, mine)
    for key, show in ((_NOTICE, st.success), (_PROBLEM, st.error)):
        if said := st.session_state.pop(key, None):
            show(safe_markdown(said))
    if problem:
        st.warning(safe_markdown(problem), icon=":material/database:")


def _label(key: str, preset: Preset) -> str:
    return f"{preset.name} · built-in" if key.startswith("built-in:") else preset.name


def _apply(preset: Preset | None) -> None:
    if preset is None:
        return
    state = st.session_state
    if preset.sets("system_prompt"):
        state["system_prompt"] = preset.system_prompt or ""
    chosen = {name: getattr(preset, name) for name in SAMPLING_FIELDS
              if preset.sets(name) and getattr(preset, name) is not None}
    sampling_settings.choose(chosen)
    if preset.sets("max_new_tokens") and preset.max_new_tokens is not None:
        state["max_new_tokens"] = preset.max_new_tokens
    if preset.sets("seed"):
        state["seed"] = preset.seed
    if preset.sets("thinking"):
        state["thinking"] = _THINKING_LABELS[preset.thinking]
    full_run = False
    if preset.model is not None:
        if "api_base_url" in preset.model.model_fields_set and \
                preset.model.api_base_url != str(state.get(_MODEL_KEYS["api_base_url"], "")):
            # Another server: a key the user typed for theirs is not sent to it (a shared preset names any URL);
            # the app's own key stays bound to the app's own server.
            configured = ModelSettings.from_env(default_backend)
            api_keys.hold(_API_KEY, configured.api_base_url, configured.api_key)
        state["backend"] = preset.model.backend
        for field in preset.model.model_fields_set - {"backend"}:  # what it leaves out stays as it is
            state[_MODEL_KEYS[field]] = getattr(preset.model, field)
        full_run = True
    if preset.tools is not None:
        for page in TOOL_PAGES:
            state[_PENDING_TOOLS.format(page=page)] = list(preset.tools)
        full_run = True
    state[_FULL_RUN] = full_run
    state[_NOTICE] = f"Applied **{preset.name}**."


def current(name: str, description: str, include_model: bool, tools: list[str] | None) -> Preset:
    """The sidebar's settings now, as a preset (PresetError for a name or value the checks refuse)."""
    state = st.session_state
    data: dict[str, object] = {"name": name, "description": description,
                               "system_prompt": state.get("system_prompt", "")}
    for name_ in (*SAMPLING_FIELDS, "max_new_tokens", "seed"):
        if name_ in state:
            data[name_] = state[name_]
    labels = {label: value for value, label in _THINKING_LABELS.items()}
    data["thinking"] = labels.get(state.get("thinking") or "Model default")
    for name_ in ("temperature", "top_p", "repetition_penalty"):
        if name_ in data:
            data[name_] = float(data[name_])  # type: ignore[arg-type]
    for name_ in ("top_k", "max_new_tokens"):
        if name_ in data:
            data[name_] = int(data[name_])  # type: ignore[call-overload]
    if include_model:  # the chosen backend's own fields only: not another backend's (private) server
        backend = str(state.get("backend", "hf"))
        data["model"] = {"backend": backend, **{field: str(state.get(_MODEL_KEYS[field], "") or "").strip()
                                                for field in _BACKEND_FIELDS.get(backend, ("model_path",))}}
    if tools is not None:
        data["tools"] = tools
    return parse_preset(data)


def _tools_on(page: str) -> list[str] | None:
    if page not in TOOL_PAGES:
        return None
    prefix = f"settings.{page}.enabled."
    return sorted(key.removeprefix(prefix) for key, on in st.session_state.items()
                  if isinstance(key, str) and key.startswith(prefix) and on)


def _manage(owner: str, page: str, editing: Preset | None, mine: list[Preset]) -> None:
    """The Manage popover: save the sidebar's settings as a new preset (or over the one picked), delete the one
    picked, export and import."""
    st.markdown("**Save the settings as a preset**")
    name = st.text_input("Name", key="presets.name", max_chars=100,
                         placeholder=editing.name if editing is not None else "e.g. Code reviewer")
    st.text_input("Description (optional)", key="presets.description", max_chars=500)
    st.checkbox("Include the model", key="presets.include_model",
                help="Applying it then switches to this backend and model (never an API key).")
    tools = _tools_on(page)
    if tools is not None:
        st.checkbox(f"Include the tools switched on ({', '.join(tools) or 'none'})", key="presets.include_tools",
                    help="Applying it then switches these tools on, and the others off, on the Tools pages.")
    st.button("Save as a new preset", key="presets_save", type="primary", disabled=not name.strip(),
              on_click=_save, args=(owner, tools, None))
    if editing is not None:
        st.button(safe_label(f"Update {editing.name!r} with the settings"), key="presets_update",
                  on_click=_save, args=(owner, tools, editing),
                  help="Its name and description stay unless you typed new ones above; it keeps its model and "
                       "tools unless you tick them.")
        st.button(safe_label(f"Delete {editing.name!r}"), key="presets_delete", icon=":material/delete:",
                  on_click=_delete, args=(owner, editing.name))
    st.divider()
    _files(owner, mine)


def _save(owner: str, tools: list[str] | None, editing: Preset | None) -> None:
    """Save the sidebar's settings under the name typed (a new preset), or over `editing`."""
    state = st.session_state
    name = str(state.get("presets.name") or "").strip() or (editing.name if editing is not None else "")
    description = str(state.get("presets.description") or "").strip() or (
        editing.description if editing is not None else "")
    include_tools = bool(state.get("presets.include_tools")) and tools is not None
    try:
        preset = current(name, description, bool(state.get("presets.include_model")),
                         tools if include_tools else None)
        if editing is not None:  # the model and tools it switched, it goes on switching unless ticked above
            data = preset.stored()
            if editing.model is not None and "model" not in data:
                data["model"] = editing.model.model_dump()
            if editing.tools is not None and "tools" not in data:
                data["tools"] = editing.tools
            preset = parse_preset(data)
        store().save(owner, preset, replaces=editing.name if editing is not None else None)
    except (PresetError, StorageError) as exc:
        state[_PROBLEM] = f"Not saved: {exc}"
        return
    state[_NOTICE] = f"Saved the preset **{preset.name}**: {preset.summary()}."
    state[PICK] = f"mine:{preset.name}"
    state["presets.name"] = state["presets.description"] = ""


def _delete(owner: str, name: str) -> None:
    try:
        store().delete(owner, name)
    except StorageError as exc:
        st.session_state[_PROBLEM] = f"Not deleted: {exc}"
        return
    st.session_state[PICK] = None
    st.session_state[_NOTICE] = f"Deleted the preset **{name}**."


def _files(owner: str, mine: list[Preset]) -> None:
    st.download_button("Export my presets", presets_file(mine), file_name="presets.json", mime="application/json",
                       key="presets_export", icon=":material/download:", disabled=not mine,
                       on_click="ignore")
    upload = st.file_uploader("Import presets", type=["json"], key="presets.import",
                              help="A file exported here (on any machine). Presets of the same names are replaced.")
    st.button("Import", key="presets_import", disabled=upload is None, on_click=_import,
              args=(owner, upload.getvalue() if upload is not None else b""))


def _import(owner: str, data: bytes) -> None:
    try:
        presets = read_presets_file(data)
        added, replaced = store().import_all(owner, presets)
    except (PresetError, StorageError) as exc:  # PresetError is a ValueError: any mistake in the file
        st.session_state[_PROBLEM] = f"Nothing imported: {exc}"
        return
    st.session_state[_NOTICE] = f"Imported {added + replaced} preset{'s' if added + replaced != 1 else ''}: " \
                                f"{added} new, {replaced} replaced."
