"""The prompts of a headless comparison: a JSONL file, one JSON object a line (blank lines are skipped):

    {"prompt": "What is 17 * 23?", "tools": ["calculator"], "tool_choice": "calculator", "id": "mult"}

`prompt` (required): the user's message. `tools`: the names of the tools the targets may call (none: no tools).
`tool_choice`: auto (the default), none, required or one of `tools`; a target's own tool choice, where it has one,
overrides it. `id`: a name for the prompt in the report (else its line number).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

MAX_PROMPTS = 10_000


class PromptsError(ValueError):
    """A prompts file that cannot be used; the message names the line and the field."""


class PromptSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: Annotated[str, StringConstraints(min_length=1)]
    tools: list[str] = Field(default_factory=list)
    tool_choice: str = "auto"
    id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None

    @model_validator(mode="after")
    def _choice_among_tools(self) -> PromptSpec:
        if len(set(self.tools)) != len(self.tools):
            raise ValueError("tools: a tool is named twice")
        if self.tool_choice == "required" and not self.tools:
            raise ValueError("tool_choice 'required' needs at least one tool in tools")
        if self.tool_choice not in ("auto", "none", "required", *self.tools):
            raise ValueError(f"tool_choice {self.tool_choice!r} is neither auto, none, required nor one of tools")
        return self


def load_prompts(path: str | Path, known_tools: Collection[str]) -> list[PromptSpec]:
    """The prompts of a JSONL file; PromptsError (naming the line) for one that is no prompt or names a tool that
    is not among `known_tools`."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"cannot read the prompts file {str(path)!r}: {exc}") from exc
    prompts: list[PromptSpec] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptsError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        try:
            spec = PromptSpec.model_validate(data)
        except ValidationError as exc:
            raise PromptsError(f"{where}: {_describe(exc)}") from None
        unknown = [name for name in spec.tools if name not in known_tools]
        if unknown:
            raise PromptsError(f"{where}: unknown tool {unknown[0]!r} (the tools: {', '.join(sorted(known_tools))})")
        if spec.id is None:
            spec = spec.model_copy(update={"id": f"line {number}"})
        prompts.append(spec)
        if len(prompts) > MAX_PROMPTS:
            raise PromptsError(f"{path}: more than {MAX_PROMPTS} prompts")
    if not prompts:
        raise PromptsError(f"{path}: no prompts (one JSON object a line, like "
                           '{"prompt": "What is 17 * 23?", "tools": ["calculator"]})')
    return prompts


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False)[:3]:
        where = ".".join(str(part) for part in item["loc"])
        what = str(item["ctx"]["error"]) if item["type"] == "value_error" else item["msg"]
        if item["type"] == "extra_forbidden":
            what = "unknown key"
        problems.append(f"{where}: {what}" if where else what)
    return "; ".join(problems)
