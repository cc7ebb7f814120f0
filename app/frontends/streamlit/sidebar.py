"""The controls every page shares: the model picker at the top of the page, and in the sidebar the history (drawn
by app/frontends/streamlit/history.py into its place), the generation settings in one collapsible section, and the
current page's own settings (tools) below them.

Rendered once per run from app/main.py (widgets in the entrypoint keep their values across pages); pages read
the result with `current()`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.clients.backends import BACKENDS
from app.clients.choice import default_backend
from app.clients.client_protocol import GenerationParams
from app.clients.embedded_model import model_folder
from app.clients.generation_defaults import SAMPLING_FIELDS, defaults_for_settings, display_name
from app.config import ModelSettings
from app.frontends.streamlit import api_keys, model_library, preferences, presets, sampling_settings
from app.frontends.streamlit.safe_markdown import safe_label

# Empty: the model's own default system prompt, where its chat template has one (SmolLM2's, the one it was trained
# with, answered the smoke set better than a generic "helpful, concise assistant": bench/smoke_set.py).
DEFAULT_SYSTEM_PROMPT = ""
_STATE_KEY = "_sidebar"
_PAGE_SECTION_KEY = "_sidebar_page_section"
_HISTORY_SECTION_KEY = "_sidebar_history_section"
_STATUS_SECTION_KEY = "_model_status_section"


@dataclass(frozen=True)
class SidebarState:
    model: ModelSettings
    params: GenerationParams
    system_prompt: str


def current() -> SidebarState:
    return st.session_state[_STATE_KEY]


def page_section() -> DeltaGenerator:
    """The sidebar's place for the current page's own settings (e.g. the Tools page's tool list)."""
    return st.session_state[_PAGE_SECTION_KEY]


def history_section() -> DeltaGenerator:
    """The top of the sidebar, where app/frontends/streamlit/history.py draws the conversations."""
    return st.session_state[_HISTORY_SECTION_KEY]


def status_section() -> DeltaGenerator:
    """Next to the model picker, where the page says what the model can do and is doing
    (app/frontends/streamlit/chat_page.py)."""
    return st.session_state[_STATUS_SECTION_KEY]


def model_name(settings: ModelSettings) -> str:
    """The model these settings name, before it is loaded: the folder's or file's name, or the API model id."""
    if settings.backend == "openai":
        return settings.api_model or "the server's first model"
    return display_name(model_folder(settings.model_path))


def _chosen_before_drawing(defaults: ModelSettings) -> ModelSettings:
    """The backend and model the widgets hold at the start of this run (a change is in session state before the
    run), for the model picker's label, which is drawn before them."""
    state = st.session_state
    return replace(defaults, backend=state.get("backend", defaults.backend),
                   model_path=state.get("settings.model.model_path", defaults.model_path),
                   api_model=state.get("settings.model.api_model", defaults.api_model))


def render(page: str = "chat") -> SidebarState:
    defaults = ModelSettings.from_env(default_backend)
    preferences.restore()  # the user's last settings, on the first run of a session (a refresh)
    # Valid for this run only: fresh placeholders are made on every run, in the order they show.
    picker_row = st.container(horizontal=True, vertical_alignment="center", key="model_picker_row")
    st.session_state[_HISTORY_SECTION_KEY] = st.sidebar.container()
    generation_box = st.sidebar.container()
    st.session_state[_PAGE_SECTION_KEY] = st.sidebar.container()
    shown = _chosen_before_drawing(defaults)
    with picker_row:
        backend_label = BACKENDS[shown.backend].label if shown.backend in BACKENDS else shown.backend
        with st.popover(safe_label(f"{model_name(shown)} · {backend_label}"), icon=":material/neurology:",
                        key="model_picker",
                        help="Backend and model, for every page and browser tab of this session"):
            backend = st.selectbox(
                "Backend",
                options=list(BACKENDS),
                format_func=lambda name: BACKENDS[name].label,
                index=list(BACKENDS).index(defaults.backend) if defaults.backend in BACKENDS else 0,
                key="backend",
            )
            model = _model_settings(backend, defaults)
            model_library.details(model)
        st.session_state[_STATUS_SECTION_KEY] = st.container()

    presets.full_run_started()
    with generation_box:
        return _generation_settings(model, page)


@st.fragment
def _generation_settings(model: ModelSettings, page: str) -> SidebarState:
    """The Generation settings section, as a fragment: changing a setting reruns this section alone, not the page
    and its conversation (a long one costs on every full run; an answer being written goes on). The pages read the
    result from session state on their next run, and the settings are stored for the user here. A change of model
    is a full run, which calls this again with the new `model`. Presets (`page`: the page shown, whose tools a
    preset may save) are at the top."""
    with st.expander("Generation settings", icon=":material/tune:"):
        presets.render(page)
        system_prompt = st.text_area("System prompt", value=DEFAULT_SYSTEM_PROMPT, key="system_prompt",
                                     placeholder="Empty: the model's own default, if its chat template has one")
        sampling = sampling_settings.render(defaults_for_settings(model),
                                            server_decides=model.backend == "openai")
        max_new_tokens = st.number_input("Max new tokens", min_value=1, max_value=32768, value=512, step=64,
                                         key="max_new_tokens")
        seed = st.number_input("Seed", min_value=0, max_value=2**32 - 1, value=None, step=1, key="seed",
                               placeholder="random", help="The same seed, settings and prompt give the same "
                               "answer again (on the same machine and backend). Empty: a new draw each time.")
        thinking = st.segmented_control(
            "Thinking", list(_THINKING), default="Model default", key="thinking",
            help="For reasoning models whose chat template has a thinking switch (Qwen3, SmolLM3...): think before "
                 "answering, or answer at once. Model default: whatever the template does. Other models ignore it.")

    values = {name: sampling[name] for name in SAMPLING_FIELDS}  # type: ignore[literal-required]
    result = SidebarState(
        model=model,
        params=GenerationParams(**values, max_new_tokens=int(max_new_tokens),
                                seed=None if seed is None else int(seed), thinking=_THINKING.get(thinking or ""),
                                server_defaults=frozenset(sampling["server_defaults"])),
        system_prompt=system_prompt,
    )
    st.session_state[_STATE_KEY] = result
    preferences.remember()
    return result


_API_KEY = "settings.model.api_key"
_THINKING = {"Model default": None, "On": True, "Off": False}
_DEVICES = ["auto", "cpu", "cuda", "mps"]
_DTYPES = ["auto", "float32", "bfloat16", "float16"]


def _choice(options: list[str], value: str) -> int:
    return options.index(value) if value in options else 0


def _model_settings(backend: str, defaults: ModelSettings) -> ModelSettings:
    """The backend's own inputs; the conversation is untouched when any of them changes. (Keys under "settings."
    keep their values while another backend's inputs are shown, see app/main.py.)"""
    if backend == "openai":
        base_url = st.text_input("API base URL", value=defaults.api_base_url, key="settings.model.api_base_url",
                                 help="Any OpenAI-compatible server, e.g. `vllm serve` (http://host:8000/v1).")
        if _API_KEY not in st.session_state:  # the first run of a session: DEMO_API_KEY stays on the server
            api_keys.hold(_API_KEY, defaults.api_base_url, defaults.api_key)
        api_key = api_keys.key_input("API key", _API_KEY, base_url)
        api_model = st.text_input("Model", value=defaults.api_model, key="settings.model.api_model",
                                  placeholder="empty: the first model the server lists")
        return replace(defaults, backend=backend, api_base_url=base_url.strip(), api_key=api_key,
                       api_model=api_model.strip())
    model_library.render(backend)
    model_path = st.text_input(
        "Model path",
        value=defaults.model_path,
        placeholder="empty: embedded SmolLM2-135M-Instruct",
        help="A .gguf file, or a folder with one (LM Studio's and Ollama's models are GGUF files). Nothing is "
             "downloaded." if backend == "llamacpp" else
             "A local Hugging Face model folder (config.json + safetensors). Nothing is downloaded.",
        key="settings.model.model_path",
    )
    if backend == "llamacpp":
        with st.expander("Device and threads"):
            gpu_layers = int(st.number_input(
                "GPU layers", -1, 1000, defaults.llamacpp_gpu_layers, key="settings.model.llamacpp_gpu_layers",
                help="Layers offloaded to the GPU (a CUDA or Metal build of llama-cpp-python): -1 all, 0 none."))
            threads = int(st.number_input(
                "Threads", 0, 256, defaults.llamacpp_threads, key="settings.model.llamacpp_threads",
                help="CPU threads; 0: one per physical core, as llama-server picks."))
        return replace(defaults, backend=backend, model_path=model_path.strip(), llamacpp_gpu_layers=gpu_layers,
                       llamacpp_threads=threads)
    if backend == "vllm":
        with st.expander("vLLM engine"):
            dtype = st.selectbox("Precision", _DTYPES, key="settings.model.vllm_dtype",
                                 index=_choice(_DTYPES, defaults.dtype))
            v = defaults.vllm
            options = replace(
                v,
                gpu_memory_utilization=st.slider("Memory share", 0.0, 0.99, v.gpu_memory_utilization, 0.01,
                                                 key="settings.model.vllm_gpu_memory_utilization",
                                                 help="Share of GPU memory (of RAM on a CPU) vLLM reserves. "
                                                 "0: automatic (0.9 on a GPU, 0.3 on a CPU)."),
                tensor_parallel_size=int(st.number_input("Tensor parallel size", 1, 64, v.tensor_parallel_size,
                                                         key="settings.model.vllm_tensor_parallel_size",
                                                         help="GPUs that split each layer (one machine).")),
                pipeline_parallel_size=int(st.number_input("Pipeline parallel size", 1, 64, v.pipeline_parallel_size,
                                                           key="settings.model.vllm_pipeline_parallel_size",
                                                           help="Groups of layers on different GPUs or machines.")),
                distributed_executor_backend=st.selectbox(
                    "Executor", ["mp", "ray"], index=_choice(["mp", "ray"], v.distributed_executor_backend),
                    key="settings.model.vllm_executor",
                    help="mp: one machine. ray: several machines joined in a Ray cluster."),
                enforce_eager=st.checkbox("Enforce eager (no CUDA graphs)", value=v.enforce_eager,
                                          key="settings.model.vllm_enforce_eager"),
                quantization=st.text_input("Quantization", value=v.quantization, key="settings.model.vllm_quantization",
                                           placeholder="from the model's config (awq, gptq, fp8...)").strip(),
            )
        return replace(defaults, backend=backend, model_path=model_path.strip(), dtype=dtype, vllm=options)
    with st.expander("Device and precision"):
        device = st.selectbox("Device", _DEVICES, key="settings.model.device", index=_choice(_DEVICES, defaults.device))
        dtype = st.selectbox("Precision", _DTYPES, key="settings.model.dtype", index=_choice(_DTYPES, defaults.dtype))
    return replace(defaults, backend=backend, model_path=model_path.strip(), device=device, dtype=dtype)
