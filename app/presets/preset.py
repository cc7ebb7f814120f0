"""A preset: settings a user applies in one click instead of retyping them. A system prompt, sampling settings, and
optionally a model and the tools to switch on. A field a preset leaves out is left as it is when it is applied (a
preset of a system prompt alone keeps the sliders); a field given as null means "the default" (a random seed, the
model's thinking default).

Presets travel as a JSON file ({"presets": [...]}), checked here field by field: an import names the preset and the
field that is wrong, and adds nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from app.clients.backends import BACKENDS
from app.domain.generation_params import GenerationParams
from app.domain.validation import describe

MAX_NAME = 100
MAX_PRESETS = 200  # per user, and per imported file
MAX_FILE_BYTES = 1_000_000
FILE_FORMAT = "composite-demo-presets"

_Strict = ConfigDict(extra="forbid", strict=True)
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME)]
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]


class PresetError(ValueError):
    """A preset or a presets file that cannot be used; the message names the preset and the field."""


class PresetModel(BaseModel):
    """The model a preset switches to (never an API key: a preset file is shared)."""

    model_config = _Strict

    backend: str
    model_path: Annotated[str, Field(max_length=4096)] = ""
    api_base_url: Annotated[str, Field(max_length=2048)] = ""
    api_model: Annotated[str, Field(max_length=512)] = ""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value[:40]!r}; choose one of: {', '.join(BACKENDS)}")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL, not {value[:80]!r}")
        return value


class Preset(BaseModel):
    """The ranges are the sidebar's: a preset holds nothing the sidebar could not show."""

    model_config = _Strict

    name: Name
    description: Annotated[str, Field(max_length=500)] = ""
    system_prompt: Annotated[str, Field(max_length=20_000)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(ge=0.05, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0, le=500)] | None = None
    repetition_penalty: Annotated[float, Field(ge=1.0, le=2.0)] | None = None
    max_new_tokens: Annotated[int, Field(ge=1, le=32768)] | None = None
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
    thinking: bool | None = None
    model: PresetModel | None = None
    tools: Annotated[list[ToolName], Field(max_length=256)] | None = None  # the tools switched on; the rest off

    def stored(self) -> dict[str, Any]:
        """The preset as JSON, with only the fields it sets (an absent one is left alone when it is applied)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def sets(self, field: str) -> bool:
        return field in self.model_fields_set

    def applied_to(self, params: GenerationParams, system_prompt: str) -> tuple[GenerationParams, str]:
        """These generation settings and system prompt with the preset's fields in place of theirs (what the
        sidebar shows after Apply; the model and tools are the front end's to switch)."""
        changes: dict[str, Any] = {}
        for field in ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens"):
            if self.sets(field) and getattr(self, field) is not None:
                changes[field] = getattr(self, field)
        for field in ("seed", "thinking"):
            if self.sets(field):
                changes[field] = getattr(self, field)
        if changes.keys() & {"temperature", "top_p", "top_k", "repetition_penalty"}:
            changes["server_defaults"] = params.server_defaults - changes.keys()  # chosen: sent to a server
        system = (self.system_prompt or "") if self.sets("system_prompt") else system_prompt
        return replace(params, **changes), system

    def summary(self) -> str:
        """What applying it changes, in words."""
        parts = []
        if self.sets("system_prompt"):
            parts.append("system prompt" if self.system_prompt else "no system prompt")
        sampling = [f"{name.replace('_', ' ')} {getattr(self, name)}" for name in
                    ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens")
                    if self.sets(name) and getattr(self, name) is not None]
        parts.extend(sampling)
        if self.sets("seed"):
            parts.append(f"seed {self.seed}" if self.seed is not None else "random seed")
        if self.sets("thinking"):
            parts.append({None: "thinking: model default", True: "thinking on", False: "thinking off"}[self.thinking])
        if self.model is not None:
            parts.append(f"model {self.model.api_model or self.model.model_path or 'embedded'} ({self.model.backend})")
        if self.tools is not None:
            parts.append(f"tools: {', '.join(self.tools) or 'none'}")
        return ", ".join(parts) or "changes nothing"


def parse_preset(data: Any, where: str = "") -> Preset:
    """One preset from JSON data; PresetError naming the field."""
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise PresetError(describe(exc, where)) from exc


def presets_file(presets: list[Preset]) -> bytes:
    """The presets as a file to download (and to import again, here or on another machine)."""
    return (json.dumps({"format": FILE_FORMAT, "version": 1, "presets": [preset.stored() for preset in presets]},
                       ensure_ascii=False, indent=2) + "\n").encode()


def read_presets_file(data: bytes) -> list[Preset]:
    """The presets of an imported file; PresetError, naming the preset and field, for anything wrong in it (then
    none of them is taken)."""
    if len(data) > MAX_FILE_BYTES:
        raise PresetError(f"The file is {len(data):,} bytes; a presets file is at most {MAX_FILE_BYTES:,}.")
    try:
        document = json.loads(data.decode("utf-8-sig"))  # a byte-order mark, as Notepad writes one, is fine
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or an integer of thousands of digits
        raise PresetError(f"The file is not JSON ({exc}); export presets here to see the format.") from exc
    if not isinstance(document, dict) or not isinstance(document.get("presets"), list):
        raise PresetError('A presets file is a JSON object with a "presets" list; export presets here to see the '
                          "format.")
    items = document["presets"]
    if len(items) > MAX_PRESETS:
        raise PresetError(f"The file holds {len(items):,} presets; at most {MAX_PRESETS} can be imported at once.")
    presets = []
    for number, item in enumerate(items, 1):
        name = item.get("name") if isinstance(item, dict) else None
        where = f"preset {number}" + (f" ({str(name)[:MAX_NAME]!r})" if isinstance(name, str) else "")
        presets.append(parse_preset(item, where))
    names = [preset.name.casefold() for preset in presets]
    twice = next((preset.name for preset in presets if names.count(preset.name.casefold()) > 1), None)
    if twice is not None:
        raise PresetError(f"The file holds two presets named {twice!r}: rename one.")
    return presets
