"""The Models page: the models on this machine (app/models/discovery.py) with what each is and whether it fits, a
short list of recommended ones, and, only when the user allowed the network, a search of the Hugging Face Hub and
downloads with progress (app/models/hub.py, app/models/downloads.py).

Downloads belong to the process, like the disk they fill: a refresh, or another tab, shows them where they are.
Their section is a fragment that redraws itself every second while one runs, so the page around it stays still.
"""

from __future__ import annotations

import math

import streamlit as st

from app.clients.memory_fit import describe_bytes, total_bytes
from app.config import ModelSettings
from app.frontends.streamlit import model_library, state
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.models.discovery import FoundModel, hf_cache_dir
from app.models.downloads import Download, Downloads, Progress
from app.models.hub import (
    HubModel,
    HubUnavailable,
    NotEnoughSpace,
    Plan,
    Repository,
    check_space,
    delete_from_cache,
    endpoint,
    folder_plan,
    gguf_plan,
    is_in_cache,
    present_bytes,
    repository,
    require_network,
    search,
)
from app.models.memory_at_context import fit_at_context
from app.models.model_files import describe_count
from app.models.recommended import Recommendation, for_machine

_KIND_LABEL = {"chat": "chat", "speech": "speech to text", "embedding": "embeddings"}
_SEARCH = "models.search"
_REPO = "models.repository"  # the repository opened from the search or the recommendations
_CHOICE = "models.choice"
_NOTICE = "models.notice"  # what the last action did, shown once at the top
_PICKED = "models.picked"
_REFUSED = "models.refused"  # why the last action was refused, shown once at the top
_ENDED_SEEN = "models.ended_seen"  # the downloads this session has seen end


@st.cache_resource(show_spinner=False)
def downloads() -> Downloads:
    """This process's downloads: the same for every session, as the disk is."""
    return Downloads()


def render(settings: ModelSettings) -> None:
    state.forget_page_change()  # this run draws the whole page
    st.title("Models")
    notice = st.session_state.pop(_NOTICE, None)
    if notice:
        st.success(safe_markdown(notice), icon=":material/check_circle:")
    refused = st.session_state.pop(_REFUSED, None)
    if refused:
        st.error(safe_markdown(refused), icon=":material/error:")
    _downloads_section()
    try:
        require_network()
        online, offline_reason = True, ""
    except HubUnavailable as exc:
        online, offline_reason = False, str(exc)
    # Keyed, so that the open tab stays open when a download's section appears above it.
    here, recommended, hub = st.tabs(["On this machine", "Recommended", "Search the Hub"], key="models.tab",
                                     on_change="rerun")
    with here:
        _on_this_machine(settings)
    with recommended:
        _recommended(online, offline_reason)
    with hub:
        if online:
            st.caption(safe_markdown(f"Searching and downloading contact **{endpoint()}** only (DEMO_ALLOW_DOWNLOADS "
                                     f"is on). Files go to the Hugging Face cache, `{hf_cache_dir()}`."))
            _search()
        else:
            st.info(safe_markdown(offline_reason), icon=":material/cloud_off:")
    repo = st.session_state.get(_REPO)
    if online and isinstance(repo, Repository):
        _repository(repo)


# ----- on this machine ------------------------------------------------------------------------------------------

def _on_this_machine(settings: ModelSettings) -> None:
    head = st.container(horizontal=True, vertical_alignment="center")
    head.caption("The embedded model, the Hugging Face cache, ~/models, LM Studio's folder, Ollama's store and the "
                 "folders in DEMO_MODEL_DIRS. Nothing is loaded to list them; the fit is at the picker's context.",
                 width="stretch")
    head.button("Look again", icon=":material/refresh:", key="models_rescan", on_click=model_library.rescan)
    found = model_library.on_this_machine()
    if not found:
        st.info("No models found. Fetch one from the Hub, or put a .gguf file or a model folder in ~/models.",
                icon=":material/info:")
        return
    st.dataframe([_row(model, settings) for model in found], hide_index=True, width="stretch")
    by_path = {str(model.files.path): model for model in found}
    picked = st.selectbox("A model's details", list(by_path), index=None, key=_PICKED,
                          format_func=lambda path: safe_label(f"{by_path[path].name} · {by_path[path].source}"),
                          placeholder="Pick one to use it for chat, or to delete it")
    if picked in by_path:
        _chosen(by_path[picked], settings)


def _row(model: FoundModel, settings: ModelSettings) -> dict[str, object]:
    files = model.files
    fit = fit_at_context(files, settings.max_context_tokens or None, settings)
    knows = [name for name, known in (("tools", files.tools), ("thinking", files.thinking),
                                      ("pictures", files.vision)) if known]
    return {
        "Model": files.name,
        "For": _KIND_LABEL[files.kind],
        "Format": ("GGUF " if files.format == "gguf" else "safetensors ") + (files.quantization or ""),
        "Parameters": describe_count(files.parameters) if files.parameters else "",
        "On disk": describe_bytes(files.size_bytes),
        "Context": f"{files.context_length:,}" if files.context_length else "",
        "Knows": ", ".join(knows),
        "Licence": files.licence or "not stated",
        "Fits": "" if fit.fits is None else ("yes" if fit.fits else "no"),
        "From": model.source,
    }


def _chosen(model: FoundModel, settings: ModelSettings) -> None:
    files = model.files
    with st.container(border=True, key="models_chosen"):
        st.markdown(safe_markdown(f"**{files.name}**  \n`{files.path}`"))
        st.caption(safe_markdown(model_library.facts(files)))
        if files.problems:
            st.warning(safe_markdown("; ".join(files.problems)), icon=":material/warning:")
        if files.kind == "chat":
            st.caption(safe_markdown(fit_at_context(files, settings.max_context_tokens or None, settings).describe()))
        row = st.container(horizontal=True)
        if files.kind == "chat":
            engine = {"llamacpp": "llama.cpp", "hf": "transformers", "vllm": "vLLM"}.get(files.engine, files.engine)
            row.button(f"Use for chat ({engine})", icon=":material/play_arrow:", key="models_use", type="primary",
                       on_click=_use, args=(model,), disabled=bool(files.problems))
        else:
            row.caption(f"A {_KIND_LABEL[files.kind]} model: "
                        + ("voice input uses it." if files.kind == "speech" else "document search uses it."))
        if is_in_cache(files.path):
            with row.popover("Delete from disk", icon=":material/delete:"):
                st.write(safe_markdown(f"Deletes **{files.name}** ({describe_bytes(files.size_bytes)}) from the "
                                       "Hugging Face cache. Fetching it again downloads it again."))
                st.button("Delete", key="models_delete", type="primary", on_click=_delete, args=(model,))
        else:
            row.caption(f"Kept by {model.source}: delete it there.")


def _use(model: FoundModel) -> None:
    model_library.use(model.files)
    st.session_state[_NOTICE] = f"The picker now loads **{model.name}**: open Chat, Tools or All Tools to use it."


def _delete(model: FoundModel) -> None:
    try:
        freed = delete_from_cache(model.files.path)
    except (OSError, ValueError) as exc:
        st.session_state[_REFUSED] = f"Could not delete {model.name}: {exc}"
        return
    model_library.rescan()
    st.session_state[_PICKED] = None
    st.session_state[_NOTICE] = f"Deleted {model.name}: {describe_bytes(freed)} freed."


# ----- downloads --------------------------------------------------------------------------------------------------

def _downloads_section() -> None:
    listed = downloads().all()
    if listed:
        st.subheader("Downloads")
        # Redrawn every second while one runs; when the last one ends, the page runs again and the redraws stop.
        running = any(download.running for download in listed)
        st.fragment(_downloads, run_every=1.0 if running else None)()


def _downloads() -> None:
    """Each download's bar. A download this session sees end for the first time reruns the page (and when it is
    done, the list of models is read again, with it)."""
    state.rerun_if_page_changed()  # "Use for chat", "Clear" or a refusal: the rest of the page changes too
    for download in downloads().all():
        _download_row(download, download.progress())


def _download_row(download: Download, progress: Progress) -> None:
    key = download.plan.key
    with st.container(border=True, key=f"download_{abs(hash(key))}"):
        st.markdown(safe_markdown(f"**{progress.label}**"))
        st.progress(progress.fraction, text=_progress_text(progress))
        row = st.container(horizontal=True)
        if progress.state in ("downloading", "verifying"):
            row.button("Cancel", icon=":material/close:", key=f"cancel_{key}", on_click=download.cancel)
            return
        _ended_once(key, progress.state)
        if progress.state == "done" and progress.path is not None:
            row.button("Use for chat", icon=":material/play_arrow:", key=f"use_{key}", type="primary",
                       on_click=_use_fetched, args=(download,))
        elif progress.state == "failed":
            st.error(safe_markdown(progress.message), icon=":material/error:")
            row.button("Try again", icon=":material/replay:", key=f"retry_{key}", on_click=_start,
                       args=(download.plan,))
        else:
            st.caption(progress.message)
            row.button("Continue", icon=":material/download:", key=f"resume_{key}", on_click=_start,
                       args=(download.plan,))
        row.button("Clear", key=f"clear_{key}", on_click=_clear, args=(key,))


def _ended_once(key: str, ended: str) -> None:
    seen = st.session_state.setdefault(_ENDED_SEEN, set())
    if key not in seen:
        seen.add(key)
        if ended == "done":
            model_library.rescan()
        st.rerun(scope="app")


def _progress_text(progress: Progress) -> str:
    done = f"{describe_bytes(progress.done_bytes)} of {describe_bytes(progress.total_bytes)}"
    if progress.state == "downloading":
        speed = f" · {describe_bytes(int(progress.bytes_per_second))}/s" if progress.bytes_per_second else ""
        left = f" · {_duration(progress.seconds_left)} left" if progress.seconds_left is not None else ""
        return f"Downloading: {done}{speed}{left}"
    return {"verifying": f"Checking checksums: {done}", "done": f"Done: {done}, checksums match",
            "failed": f"Failed at {done}", "cancelled": f"Cancelled at {done}"}[progress.state]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, math.ceil(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _clear(key: str) -> None:
    downloads().forget(key)
    st.session_state.setdefault(_ENDED_SEEN, set()).discard(key)
    state.page_changed()


def _use_fetched(download: Download) -> None:
    from app.models.discovery import describe_path

    path = download.progress().path
    model = describe_path(path) if path is not None else None
    if model is None:
        st.session_state[_NOTICE] = f"{download.plan.label} is not a model the app can load."
    else:
        _use(model)
    state.page_changed()


def _start(plan: Plan) -> None:
    try:
        check_space(plan)
    except NotEnoughSpace as exc:
        st.session_state[_REFUSED] = str(exc)
    else:
        downloads().start(plan)
        st.session_state.setdefault(_ENDED_SEEN, set()).discard(plan.key)
    state.page_changed()  # from the downloads' fragment too: the refusal, or the new bar, shows on the page


# ----- fetching ----------------------------------------------------------------------------------------------------

def _recommended(online: bool, offline_reason: str) -> None:
    st.caption("Each from its model's own publisher (or ggml-org, llama.cpp's own, for GGUF), under a licence that "
               "allows any use. Marked by whether this machine runs it.")
    if not online:
        st.info(safe_markdown(offline_reason), icon=":material/cloud_off:")
    for fit in for_machine(total_bytes("RAM"), total_bytes("GPU")):
        item = fit.recommendation
        text, button = st.columns([9, 1], vertical_alignment="center")
        what = f"GGUF {item.quantization}" if item.quantization else "safetensors"
        text.markdown(safe_markdown(
            f"**{item.repo_id}** · {item.role} · {what} · about {describe_bytes(item.approx_bytes)} · licence "
            f"{item.licence}  \n{item.why} *{fit.reason[0].upper() + fit.reason[1:]}.*"))
        if online:
            button.button("Open", key=f"open_{item.repo_id}", on_click=_open, args=(item.repo_id, item),
                          disabled=not fit.fits)


def _search() -> None:
    query = st.text_input("Search the Hub by name", key=_SEARCH, placeholder="e.g. Qwen3-1.7B-GGUF, SmolVLM, whisper")
    if not query.strip():
        return
    try:
        found = _searched(query.strip())
    except HubUnavailable as exc:
        st.error(safe_markdown(str(exc)), icon=":material/cloud_off:")
        return
    if not found:
        st.caption(safe_markdown(f"No model on {endpoint()} matches {query!r}."))
        return
    for model in found:
        text, button = st.columns([9, 1], vertical_alignment="center")
        text.markdown(safe_markdown(_found_line(model)))
        button.button("Open", key=f"open_found_{model.repo_id}", on_click=_open, args=(model.repo_id, None))


@st.cache_data(ttl=300, show_spinner="Searching…", max_entries=32)
def _searched(query: str) -> list[HubModel]:
    return search(query)


def _found_line(model: HubModel) -> str:
    parts = [f"**{model.repo_id}**", model.task or "", "GGUF" if model.has_gguf else "",
             f"{model.downloads:,} downloads", f"licence {model.licence}" if model.licence else "licence not stated",
             "gated" if model.gated else ""]
    return " · ".join(part for part in parts if part)


def _open(repo_id: str, recommendation: Recommendation | None) -> None:
    try:
        repo = repository(repo_id)
    except HubUnavailable as exc:
        st.session_state[_REFUSED] = str(exc)
        return
    st.session_state[_REPO] = repo
    st.session_state["models.recommendation"] = recommendation
    st.session_state.pop(_CHOICE, None)


def _repository(repo: Repository) -> None:
    with st.container(border=True, key="models_repository"):
        st.markdown(safe_markdown(f"**{repo.repo_id}** at `{repo.revision[:12]}` · {repo.task or 'task not stated'}"))
        plans = _plans(repo)
        if not plans:
            st.warning("This repository has neither GGUF files nor a safetensors model folder the app can load.",
                       icon=":material/block:")
            return
        recommendation = st.session_state.get("models.recommendation")
        preferred = _preferred(plans, recommendation if isinstance(recommendation, Recommendation) else None)
        labels = list(plans)
        choice = st.radio("What to fetch", labels, index=labels.index(preferred), key=_CHOICE,
                          format_func=lambda label: safe_label(f"{label} · {describe_bytes(plans[label].total_bytes)}"))
        plan = plans[choice]
        have = present_bytes(plan)
        if have:
            st.caption(f"{describe_bytes(have)} of it is already on disk: the download continues from there.")
        acknowledged = True
        if repo.gated:
            st.warning(safe_markdown(
                f"Gated: its owner asks each user to accept its terms first, at {endpoint()}/{repo.repo_id}. Start "
                "the app with HF_TOKEN set to an access token of an account that accepted them."),
                icon=":material/lock:")
        if repo.needs_acknowledgement:
            acknowledged = st.checkbox(safe_label(
                f"I have read and accept its licence: {repo.licence or 'not stated in its model card'}"),
                key=f"models_ack_{repo.repo_id}")
        else:
            st.caption(safe_markdown(f"Licence: {repo.licence}"))
        try:
            check_space(plan)
            room = None
        except NotEnoughSpace as exc:
            room = str(exc)
            st.error(safe_markdown(room), icon=":material/storage:")
        running = downloads().get(plan.key)
        st.button("Download", icon=":material/download:", key="models_download", type="primary",
                  on_click=_start, args=(plan,),
                  disabled=not acknowledged or room is not None or (running is not None and running.running))


def _plans(repo: Repository) -> dict[str, Plan]:
    plans: dict[str, Plan] = {}
    for file in repo.gguf_choices:
        plans[f"GGUF: {file.name}"] = gguf_plan(repo, file.name)
    if repo.has_safetensors_folder:
        plans["The safetensors folder (transformers, vLLM)"] = folder_plan(repo)
    return plans


def _preferred(plans: dict[str, Plan], recommendation: Recommendation | None) -> str:
    """The recommendation's quantization, else the usual 4-bit middle (Q4_K_M), else the first."""
    wanted = (recommendation.quantization if recommendation and recommendation.quantization else "Q4_K_M").casefold()
    if recommendation is not None and recommendation.quantization is None:
        wanted = "safetensors"
    return next((label for label in plans if wanted in label.casefold()), next(iter(plans)))
