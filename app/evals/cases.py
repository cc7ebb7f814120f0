"""An eval case: a conversation up to a question, the settings to answer it with, and the checks its answer must
pass; an eval set: named cases. The shape a person writes by hand (see docs/evals.md):

    name: Calculator
    cases:
      - name: multiplies
        messages:
          - {role: user, content: "What is 17 * 23?"}
        page: tools
        tools: [calculator]
        checks:
          - {type: tool_call, name: calculator, arguments: {expression: "17 * 23"}}
          - {type: contains, text: "391"}
          - {type: max_latency, seconds: 30}

Every check is what a program can decide, except `judge`, which asks a model with a rubric and is marked as
model-judged wherever its result shows.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import regex
from jsonschema import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.domain.conversation import ToolCall
from app.limits.schema_validation import SchemaValidator

MAX_CASES = 1000
MAX_TEXT = 100_000
MAX_PATTERN = 1000  # a regular expression longer than this is refused (a hostile file's pathological pattern)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _json_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """A schema the app's bounded validator takes (app/limits/schema_validation.py: no fetched `$ref`, regexes
    under a time limit), so that a case fails when it is read rather than when it runs."""
    if schema is not None:
        try:
            SchemaValidator(schema).errors(None)  # also resolves its references, which checking alone does not
        except SchemaError as exc:
            raise ValueError(f"not a usable JSON Schema: {exc.message}") from None
    return schema


class ToolCallCheck(_Strict):
    """The answer calls `name`; `arguments` (if given) are among the call's, each equal; `schema` (if given) is a
    JSON Schema the call's arguments satisfy."""

    type: Literal["tool_call"]
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _valid(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _json_schema(schema)


class NoToolCallCheck(_Strict):
    """The answer calls no tool."""

    type: Literal["no_tool_call"]


class ContainsCheck(_Strict):
    type: Literal["contains"]
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    case_sensitive: bool = False


class MatchesCheck(_Strict):
    """The answer matches a regular expression (the `regex` package's search, which reads Python's syntax), under
    a time limit: a pattern that backtracks without end fails the check instead of freezing the app."""

    type: Literal["matches"]
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            regex.compile(pattern)
        except regex.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class JsonSchemaCheck(_Strict):
    """The answer is JSON (a fenced ```json block counts) that satisfies a JSON Schema."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _valid(cls, schema: dict[str, Any]) -> dict[str, Any]:
        return _json_schema(schema) or schema


class MaxLatencyCheck(_Strict):
    """The whole turn (tools included) takes at most `seconds`."""

    type: Literal["max_latency"]
    seconds: float = Field(gt=0, le=86_400)

    @field_validator("seconds", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class MaxTokensCheck(_Strict):
    """The turn writes at most `tokens` tokens (all its generations)."""

    type: Literal["max_tokens"]
    tokens: int = Field(gt=0, le=10_000_000)


class JudgeCheck(_Strict):
    """Model-judged: `judge` (a target's label) reads the question and the answer and says whether the answer
    meets the rubric."""

    type: Literal["judge"]
    rubric: str = Field(min_length=1, max_length=MAX_TEXT)
    judge: str = Field(min_length=1, max_length=200)


Check = Annotated[ToolCallCheck | NoToolCallCheck | ContainsCheck | MatchesCheck | JsonSchemaCheck | MaxLatencyCheck
                  | MaxTokensCheck | JudgeCheck, Field(discriminator="type")]


class Message(_Strict):
    """A message of the case's conversation, as OpenAI's chat API writes it (text only)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(default="", max_length=MAX_TEXT)
    tool_calls: list[dict[str, Any]] | None = Field(default=None, max_length=100)
    tool_call_id: str | None = Field(default=None, max_length=200)
    name: str | None = Field(default=None, max_length=200)

    @field_validator("tool_calls")
    @classmethod
    def _calls(cls, calls: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for call in calls or []:
            ToolCall.from_openai(call)  # ValueError naming what is missing, when the file is read
        return calls


class Sampling(_Strict):
    """What a case sets of its targets' sampling; the rest is each target's own. The seed is the run's (one per
    repeat)."""

    temperature: float | None = Field(default=None, ge=0, le=5)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    repetition_penalty: float | None = Field(default=None, gt=0, le=5)
    max_new_tokens: int | None = Field(default=None, ge=1, le=1_000_000)

    @field_validator("temperature", "top_p", "repetition_penalty", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def chosen(self) -> dict[str, Any]:
        return {name: value for name, value in self.model_dump().items() if value is not None}


class EvalCase(_Strict):
    name: str = Field(min_length=1, max_length=200)
    messages: list[Message] = Field(min_length=1, max_length=1000)
    page: Literal["chat", "tools", "all_tools"] = "chat"
    tools: list[str] = Field(default_factory=list, max_length=100)  # the tools switched on (Tools, All Tools)
    tool_choice: str = Field(default="auto", max_length=200)  # auto, none, required or a tool's name
    system_prompt: str | None = Field(default=None, max_length=MAX_TEXT)
    sampling: Sampling = Field(default_factory=Sampling)
    checks: list[Check] = Field(min_length=1, max_length=50)

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, messages: list[Message]) -> list[Message]:
        if messages[-1].role != "user":
            raise ValueError("the last message must be the user's: the question the case asks")
        return messages

    @property
    def question(self) -> str:
        return self.messages[-1].content

    @property
    def model_judged(self) -> bool:
        return any(isinstance(check, JudgeCheck) for check in self.checks)


class EvalSet(_Strict):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=MAX_TEXT)
    cases: list[EvalCase] = Field(min_length=1, max_length=MAX_CASES)

    @field_validator("cases")
    @classmethod
    def _names_apart(cls, cases: list[EvalCase]) -> list[EvalCase]:
        seen: set[str] = set()
        for case in cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}: a run's diff tells cases apart by name")
            seen.add(case.name)
        return cases
