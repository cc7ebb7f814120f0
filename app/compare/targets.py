"""Targets: what one pane of a comparison answers with. A label, a backend and model (ModelSettings), sampling
settings (GenerationParams), a system prompt and a tool choice.

A targets file is a JSON object holding 1 to MAX_TARGETS of them, checked strictly (unknown keys, wrong types and
out-of-range values are refused with the target and the field named):

    {"targets": [
      {"label": "SmolLM2 at its defaults"},
      {"label": "SmolLM2 hot", "sampling": {"temperature": 1.0, "seed": 7}},
      {"label": "Via the API", "model": {"backend": "openai", "api_base_url": "http://127.0.0.1:8000/v1"},
       "system_prompt": "Be brief.", "tool_choice": "required"}
    ]}

`model` (each key optional): backend (hf, vllm, llamacpp, openai), path (a local model folder; empty: the embedded
SmolLM2), device, dtype, max_context_tokens, api_base_url, api_key, api_model. What it leaves out comes from the
app's own settings (DEMO_BACKEND, DEMO_MODEL, ...: `ModelSettings.from_env(default_backend)`), so a target that names
nothing is the model the app loads, and shares its engine.

`sampling` (each key optional): temperature, top_p, top_k, repetition_penalty (left out: the model's own defaults,
as the sidebar starts from them; app/clients/generation_defaults.py), max_new_tokens, seed, thinking (true, false or
null).

`tool_choice`: auto, none, required or a tool's name; left out (null), each prompt's own choice applies (the
headless prompts file gives one per prompt, the page its sidebar's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from app.clients.backends import BACKENDS
from app.clients.choice import default_backend
from app.clients.embedded_model import model_folder
from app.clients.generation_defaults import defaults_for_settings
from app.config import ModelSettings
from app.domain.generation_params import SAMPLING_FIELDS, GenerationParams
from app.domain.validation import describe
from app.tools.tool_registry import TOOL_NAME

MAX_TARGETS = 4  # panes side by side
MAX_LABEL = 80
ALTERNATIVE_TEMPERATURE = 1.0  # default_targets' second target, unless the model's own default is that already
FALLBACK_TEMPERATURE = 0.3
SECRET_SETTINGS = ("api_key",)  # never shown, reported or stored with a vote


class TargetsError(ValueError):
    """A targets file (or a list of targets) that cannot be used; the message names the target and the field."""


@dataclass(frozen=True)
class Target:
    """One side of a comparison. Frozen and hashable; targets with equal `settings` share one loaded client."""

    label: str
    settings: ModelSettings = ModelSettings()
    params: GenerationParams = GenerationParams()
    system_prompt: str = ""
    tool_choice: str | None = None  # None: the prompt's (or the page's) choice

    def public_settings(self) -> dict[str, Any]:
        """The model settings as JSON, without secrets (the API key): what a report shows and a vote stores."""
        data = _as_json(self.settings)
        for key in SECRET_SETTINGS:
            data.pop(key, None)
        return data

    def describe(self) -> dict[str, Any]:
        """Everything about the target as JSON (no secrets): label, settings, sampling, system prompt, tool choice."""
        params = _as_json(self.params)
        params.pop("server_defaults", None)
        return {"label": self.label, "settings": self.public_settings(), "params": params,
                "system_prompt": self.system_prompt, "tool_choice": self.tool_choice}


def _as_json(value: Any) -> dict[str, Any]:
    """A frozen settings dataclass as a JSON object (nested dataclasses too; tuples and sets as sorted lists)."""
    data: dict[str, Any] = {}
    for item in fields(value):
        field_value = getattr(value, item.name)
        if hasattr(field_value, "__dataclass_fields__"):
            field_value = _as_json(field_value)
        elif isinstance(field_value, frozenset | set):
            field_value = sorted(field_value)
        elif isinstance(field_value, tuple):
            field_value = list(field_value)
        data[item.name] = field_value
    return data


# ----- the file's shape ---------------------------------------------------------------------------------------------

_Strict = ConfigDict(extra="forbid", strict=True)
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_LABEL)]


class ModelSpec(BaseModel):
    model_config = _Strict

    backend: str | None = None
    path: str | None = None
    device: str | None = None
    dtype: str | None = None
    max_context_tokens: Annotated[int, Field(ge=0)] | None = None
    api_base_url: str | None = None
    api_key: str | None = None
    api_model: str | None = None

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str | None) -> str | None:
        if value is not None and value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}; choose one of: {', '.join(BACKENDS)}")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL, not {value!r}")
        return value


class SamplingSpec(BaseModel):
    model_config = _Strict

    # The ranges GenerationParams accepts (it checks again); strict, but an int is a float too.
    temperature: Annotated[float, Field(ge=0.0, le=5.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=5.0)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    seed: int | None = None
    thinking: bool | None = None


class TargetSpec(BaseModel):
    model_config = _Strict

    label: Label
    model: ModelSpec = ModelSpec()
    sampling: SamplingSpec = SamplingSpec()
    system_prompt: str = ""
    tool_choice: str | None = None

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, value: str | None) -> str | None:
        if value is not None and value not in ("auto", "none", "required") and not TOOL_NAME.fullmatch(value):
            raise ValueError(f"must be auto, none, required or a tool's name, not {value!r}")
        return value


class TargetsFile(BaseModel):
    model_config = _Strict

    targets: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_TARGETS)]


# ----- building targets ---------------------------------------------------------------------------------------------

def load_targets(path: str | Path, base: ModelSettings | None = None) -> list[Target]:
    """The targets of a JSON file (see the module's docstring). TargetsError, naming the target and the field, when
    the file cannot be read or is not such a file."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsError(f"cannot read the targets file {str(path)!r}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TargetsError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    try:
        return parse_targets(data, base)
    except TargetsError as exc:
        raise TargetsError(f"{path}: {exc}") from None


def parse_targets(data: Any, base: ModelSettings | None = None) -> list[Target]:
    """Targets from a decoded targets file (`{"targets": [...]}`); `base`: the settings a target's `model` leaves
    out (None: ModelSettings.from_env(default_backend))."""
    if not isinstance(data, dict):
        raise TargetsError('a targets file is a JSON object: {"targets": [{"label": ...}, ...]}')
    try:
        listed = TargetsFile.model_validate(data).targets
    except ValidationError as exc:
        raise TargetsError(describe(exc, "")) from None
    base = base if base is not None else ModelSettings.from_env(default_backend)
    targets = []
    for index, raw in enumerate(listed):
        where = f"target {index + 1}"
        if isinstance(raw.get("label"), str) and raw["label"].strip():
            where += f" ({raw['label'].strip()!r})"
        try:
            spec = TargetSpec.model_validate(raw)
        except ValidationError as exc:
            raise TargetsError(describe(exc, where)) from None
        try:
            targets.append(build_target(spec, base))
        except ValueError as exc:
            raise TargetsError(f"{where}: {exc}") from None
    check_targets(targets)
    return targets


def build_target(spec: TargetSpec, base: ModelSettings) -> Target:
    """A Target from its checked spec: settings over `base`, sampling over the model's own defaults."""
    given = spec.model.model_dump(exclude_none=True)
    if "path" in given:
        given["model_path"] = given.pop("path")
        if "backend" not in given and base.backend in ("hf", "llamacpp"):
            # The base's local engine was chosen for its own model: a folder is read by transformers, a GGUF by
            # llama.cpp where it runs (or what DEMO_BACKEND names).
            given["backend"] = default_backend(given["model_path"])
    settings = replace(base, **given)
    sampling = spec.sampling.model_dump(exclude_none=True)
    defaults = defaults_for_settings(settings)
    unset = frozenset(name for name in SAMPLING_FIELDS if name not in sampling)
    # A remote server applies its model's own defaults to what the target leaves out, as the sidebar does.
    extra: dict[str, Any] = {"server_defaults": unset} if settings.backend == "openai" else {}
    params = replace(defaults.params(**{k: v for k, v in sampling.items() if k in SAMPLING_FIELDS}),
                     **{k: v for k, v in sampling.items() if k not in SAMPLING_FIELDS}, **extra)
    return Target(spec.label, settings, params, spec.system_prompt, spec.tool_choice)


def check_targets(targets: list[Target]) -> None:
    """1 to MAX_TARGETS targets with distinct, non-empty labels; TargetsError otherwise."""
    if not 1 <= len(targets) <= MAX_TARGETS:
        raise TargetsError(f"a comparison has 1 to {MAX_TARGETS} targets, not {len(targets)}")
    seen: set[str] = set()
    for index, target in enumerate(targets):
        if not target.label.strip():
            raise TargetsError(f"target {index + 1}: the label must not be empty")
        if target.label in seen:
            raise TargetsError(f"target {index + 1}: the label {target.label!r} is used twice; each target needs "
                               "its own")
        seen.add(target.label)


def default_targets(settings: ModelSettings | None = None) -> list[Target]:
    """Two targets ready to compare: the app's model (`settings`, None: ModelSettings.from_env(default_backend)) at its
    own sampling defaults, and at another temperature (ALTERNATIVE_TEMPERATURE, or FALLBACK_TEMPERATURE where that is
    its default already). Both on the same settings: they share one loaded engine."""
    settings = settings if settings is not None else ModelSettings.from_env(default_backend)
    defaults = defaults_for_settings(settings)
    extra: dict[str, Any] = {"server_defaults": frozenset(SAMPLING_FIELDS)} if settings.backend == "openai" else {}
    own = replace(defaults.params(), **extra)
    other_temperature = ALTERNATIVE_TEMPERATURE if own.temperature != ALTERNATIVE_TEMPERATURE \
        else FALLBACK_TEMPERATURE
    other = replace(own, temperature=other_temperature,
                    server_defaults=own.server_defaults - {"temperature"})
    # The labels name the model and backend: the leaderboard counts votes by label, and "temperature 1" of one
    # model is not that of another.
    name = model_label(settings)
    return [Target(f"{name} · its defaults (temperature {own.temperature:g})", settings, own),
            Target(f"{name} · temperature {other_temperature:g}", settings, other)]


def model_label(settings: ModelSettings, longest: int = 48) -> str:
    """"SmolLM2-135M-Instruct (hf)": the model these settings name and the backend, short enough for a label."""
    if settings.backend == "openai":
        name = settings.api_model or f"the API at {settings.api_base_url.split('://', 1)[-1].split('/', 1)[0]}"
    else:
        name = model_folder(settings.model_path).name or settings.model_path
    if len(name) > longest:
        name = name[: longest - 1] + "…"
    return f"{name} ({settings.backend})"
