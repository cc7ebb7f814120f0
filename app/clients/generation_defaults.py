"""Sampling defaults that fit the model in use, so its first answers make sense without touching a slider.

Per setting, the first of these that has a value wins:
1. the model's own `generation_config.json` (only keys written there: transformers' class defaults are nobody's
   recommendation; `do_sample: false` means greedy, i.e. temperature 0);
2. `RECOMMENDED`, a small table of settings from model cards (and our own measurements), for models whose folder
   carries none: the embedded SmolLM2 among them, whose card samples with temperature 0.2 and top_p 0.9;
3. `BUILT_IN` (GenerationParams' own defaults), for anything else.

The sidebar starts its sliders from these, and the API server fills in the fields a request leaves out, as vLLM's
server does with `--generation-config auto`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.clients.embedded_model import model_folder
from app.config import ModelSettings
from app.domain.generation_params import SAMPLING_FIELDS, GenerationParams

_PARAMS_DEFAULTS = GenerationParams()
# GenerationParams' own defaults: each value is written once, there.
BUILT_IN: dict[str, float | int] = {name: getattr(_PARAMS_DEFAULTS, name) for name in SAMPLING_FIELDS}
BUILT_IN_SOURCE = "built-in default"


@dataclass(frozen=True)
class Recommendation:
    """Settings recommended for model names matching `pattern` (case-insensitive search), and by whom. Every
    matching entry applies; the first to give a setting wins."""

    pattern: str
    values: dict[str, float | int]
    source: str


RECOMMENDED: tuple[Recommendation, ...] = (
    # https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct (same for 360M and 1.7B): "temperature=0.2,
    # top_p=0.9, do_sample=True". Its generation_config.json holds only token ids.
    Recommendation(r"smollm2", {"temperature": 0.2, "top_p": 0.9}, "SmolLM2 model card"),
    # Not on the card: at 1.0 the embedded 135M model ran 10 of 45 smoke-set answers to the 512-token limit, at
    # 1.1 none (bench/smoke_set.py, 3 seeds; the HF backend counts the answer's tokens only, see clients/hf/client.py).
    Recommendation(r"smollm2", {"repetition_penalty": 1.1}, "measured by bench/smoke_set.py"),
)


@dataclass(frozen=True)
class GenerationDefaults:
    """The sampling values to start from for one model, and where each came from."""

    values: dict[str, float | int] = field(default_factory=lambda: dict(BUILT_IN))
    sources: dict[str, str] = field(default_factory=lambda: dict.fromkeys(SAMPLING_FIELDS, BUILT_IN_SOURCE))

    def params(self, **overrides: Any) -> GenerationParams:
        """GenerationParams from these defaults; `overrides` that are None are left to the defaults."""
        chosen = {**self.values, **{k: v for k, v in overrides.items() if v is not None}}
        return GenerationParams(**chosen)

    def describe(self) -> str:
        """"temperature 0.2, top p 0.9 (SmolLM2 model card); top k 50, repetition penalty 1.0 (built-in default)"."""
        groups: dict[str, list[str]] = {}
        for name in SAMPLING_FIELDS:
            label = name.replace("_", " ")
            groups.setdefault(self.sources[name], []).append(f"{label} {self.values[name]:g}")
        return "; ".join(f"{', '.join(items)} ({source})" for source, items in groups.items())


def read_generation_config(folder: Path) -> dict[str, float | int]:
    """The sampling values a model folder's generation_config.json states explicitly (an unreadable file: none)."""
    try:
        raw = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    found: dict[str, float | int] = {}
    for name in SAMPLING_FIELDS:
        value = raw.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found[name] = int(value) if name == "top_k" else float(value)
    if raw.get("do_sample") is False:
        found["temperature"] = 0.0  # the model's authors chose greedy decoding
    if found.get("top_k", 0) < 0:  # some configs write -1 for "no cut"; ours is 0
        found["top_k"] = 0
    return _valid(found)


def _valid(values: dict[str, float | int]) -> dict[str, float | int]:
    """Drop values GenerationParams would refuse: a broken config must not break the sidebar or the server."""
    kept = {}
    for name, value in values.items():
        alone: dict[str, Any] = {name: value}
        try:
            GenerationParams(**alone)
        except ValueError:
            continue
        kept[name] = value
    return kept


def generation_defaults(model_name: str, folder: Path | None = None) -> GenerationDefaults:
    """Defaults for a model called `model_name` (a folder name or an API model id), read from `folder` if given."""
    layers: list[tuple[dict[str, float | int], str]] = []
    if folder is not None:
        layers.append((read_generation_config(folder), f"{folder.name}/generation_config.json"))
    layers.extend((recommendation.values, recommendation.source) for recommendation in RECOMMENDED
                  if re.search(recommendation.pattern, model_name, re.IGNORECASE))
    layers.append((BUILT_IN, BUILT_IN_SOURCE))
    values: dict[str, float | int] = {}
    sources: dict[str, str] = {}
    for name in SAMPLING_FIELDS:
        for layer, source in layers:
            if name in layer:
                values[name], sources[name] = layer[name], source
                break
    return GenerationDefaults(values, sources)


def display_name(path: Path) -> str:
    """A model's name from its path: the folder's or file's name; for a snapshot in the Hugging Face cache
    (models--org--name/snapshots/<revision>), its Hub id, not the revision. What answers record, the API serves,
    the picker shows and the recommendations match."""
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent.name.removeprefix("models--").replace("--", "/")
    return path.name


def defaults_for_settings(settings: ModelSettings) -> GenerationDefaults:
    """Defaults for the model these settings name, without loading it (the sidebar needs them before the model
    loads). The embedded model's folder may not be converted yet: its name still finds its recommendation."""
    if settings.backend == "openai":
        return generation_defaults(settings.api_model)
    folder = model_folder(settings.model_path)
    return generation_defaults(display_name(folder), folder)
