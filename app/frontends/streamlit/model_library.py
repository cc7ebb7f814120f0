"""In the model picker: the models already on this machine (app/models/discovery.py), to pick instead of typing a
path, and what the chosen model is and whether it fits at its context, before it loads.

Picking one puts its path in *Model path* and its format's engine in *Backend* (GGUF: llama.cpp; a folder:
transformers, or vLLM with a GPU); the user can change either afterwards. The list is read from disk at most once a
minute (Streamlit's data cache: the machine's models are the same for every session), and *Rescan* reads it again.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from app.clients.embedded_model import EmbeddedModelMissing, gguf_path, is_embedded, model_folder
from app.clients.memory_fit import describe_bytes
from app.config import ModelSettings
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.models.discovery import FoundModel, describe_path, discover, hf_cache_dir
from app.models.memory_at_context import fit_at_context
from app.models.model_files import ModelFiles, describe_count

PICKED = "settings.model.library_pick"  # kept across pages like the other model settings
MODEL_PATH = "settings.model.model_path"
_ENVIRONMENT = ("HOME", "HF_HOME", "HF_HUB_CACHE", "OLLAMA_MODELS", "DEMO_MODEL_DIRS")


@st.cache_data(ttl=60, show_spinner=False, max_entries=4)
def _found(environment: tuple[str, ...]) -> list[FoundModel]:
    """The models on disk; `environment` (the variables that say where to look) keys the cache."""
    return discover()


@st.cache_data(ttl=60, show_spinner=False, max_entries=64)
def _described(path: str, size: int, modified: float) -> FoundModel | None:
    """One model path's description, read again when the file changes (size and time key the cache)."""
    return describe_path(Path(path))


def on_this_machine() -> list[FoundModel]:
    """The models on disk, read at most once a minute (and again after `rescan`)."""
    return _found((*(os.environ.get(name, "") for name in _ENVIRONMENT), str(hf_cache_dir())))


def rescan() -> None:
    _found.clear()


def render(backend: str) -> None:
    """The list, above the picker's Model path (for the local backends)."""
    found = [model for model in on_this_machine() if model.files.kind == "chat"]
    paths = [str(model.files.path) for model in found]
    by_path = {str(model.files.path): model for model in found}
    if st.session_state.get(PICKED) not in (None, st.session_state.get(MODEL_PATH)):
        st.session_state[PICKED] = None  # the path was typed since: the list no longer names it
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    row.selectbox(
        "On this machine", paths, index=None, key=PICKED, on_change=_use, args=(by_path,),
        format_func=lambda path: safe_label(_choice_label(by_path[path])),
        placeholder=f"{len(found)} model{'s' if len(found) != 1 else ''} found" if found else "No models found",
        help="Models in the Hugging Face cache, ~/models, LM Studio's folder, Ollama's store and DEMO_MODEL_DIRS. "
             "Picking one sets its path and the engine for its format.")
    row.button("", icon=":material/refresh:", key="model_library_rescan", help="Look for models again",
               on_click=rescan)


def _use(by_path: dict[str, FoundModel]) -> None:
    picked = st.session_state.get(PICKED)
    model = by_path.get(picked) if isinstance(picked, str) else None
    if model is not None:
        use(model.files)


def use(files: ModelFiles) -> None:
    """A callback: the picker loads `files` from now on, on the engine for its format. Every page of the session
    follows, as with a choice made in the picker itself."""
    st.session_state[MODEL_PATH] = str(files.path)
    st.session_state["backend"] = files.engine


def _choice_label(model: FoundModel) -> str:
    files = model.files
    kind = "GGUF" if files.format == "gguf" else "safetensors"
    if files.quantization:
        kind += f" {files.quantization}"
    return f"{model.name} · {kind} · {describe_bytes(files.size_bytes)} · {model.source}"


def details(settings: ModelSettings) -> None:
    """Under the picker's inputs: what the chosen model is, and whether it fits at its context, before it loads."""
    if settings.backend == "openai":
        return
    target = _target(settings)
    if target is None:
        return
    try:
        stat = target.stat()
    except OSError:
        return
    model = _described(str(target), stat.st_size, stat.st_mtime)
    if model is None:
        return
    files = model.files
    st.caption(safe_markdown(facts(files)))
    if files.problems:
        st.warning(safe_markdown("This model's files have problems: " + "; ".join(files.problems)),
                   icon=":material/warning:")
        return
    fit = fit_at_context(files, settings.max_context_tokens or None, settings)
    if fit.fits is False:
        st.warning(safe_markdown(fit.describe() + " Loading it would likely fail or swap: pick a smaller model, a "
                                 "smaller quantization or a shorter context."), icon=":material/memory:")
    else:
        st.caption(safe_markdown(fit.describe()))


def facts(files: ModelFiles) -> str:
    """One line: format, parameters, context, what its template knows, licence."""
    parts = ["GGUF" + (f" {files.quantization}" if files.quantization else "") if files.format == "gguf"
             else "safetensors" + (f" ({files.quantization})" if files.quantization else "")]
    if files.parameters:
        parts.append(f"{describe_count(files.parameters)} parameters")
    if files.context_length:
        parts.append(f"context {files.context_length:,}")
    knows = [name for name, known in (("tools", files.tools), ("thinking", files.thinking),
                                      ("pictures", files.vision)) if known]
    parts.append("knows " + ", ".join(knows) if knows else "plain chat")
    parts.append(f"licence {files.licence}" if files.licence else "licence not stated")
    return " · ".join(parts)


def _target(settings: ModelSettings) -> Path | None:
    """The file or folder the backend would load: the embedded model's GGUF (llama.cpp) or converted folder."""
    if is_embedded(settings.model_path):
        if settings.backend == "llamacpp":
            try:
                return gguf_path()
            except EmbeddedModelMissing:
                return None
        return model_folder(settings.model_path)
    return Path(settings.model_path.strip()).expanduser()
