"""One check of one answer (cases.py): passed or not, and a line saying why. An answer is what the compare runner
read off a turn's events (app/compare/results.py, TargetResult): its text, its tool calls as they parsed, and its
figures. A `judge` check asks a model, through the `judge` callable the runner gives."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from app.compare.results import TargetResult
from app.evals.cases import (
    Check,
    ContainsCheck,
    JsonSchemaCheck,
    JudgeCheck,
    MatchesCheck,
    MaxLatencyCheck,
    MaxTokensCheck,
    NoToolCallCheck,
    ToolCallCheck,
)

# (rubric, question, answer, judge's label) -> (meets it, the judge's reason)
Judge = Callable[[str, str, str, str], tuple[bool, str]]
_FENCED_JSON = re.compile(r"```(?:json)?\s*\n(.*?)\n```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CheckResult:
    kind: str
    passed: bool
    detail: str
    model_judged: bool = False


def evaluate(check: Check, result: TargetResult, question: str = "", judge: Judge | None = None) -> CheckResult:
    """Whether `result` passes `check`. A turn that ended in an error passes no check of its answer."""
    if isinstance(check, ToolCallCheck):
        return _tool_call(check, result)
    if isinstance(check, NoToolCallCheck):
        names = [call.name for call in result.calls]
        return CheckResult(check.type, not names, "no tool call" if not names else f"called {', '.join(names)}")
    if isinstance(check, MaxLatencyCheck):
        took = result.total_time_s
        return CheckResult(check.type, took <= check.seconds, f"{took:.2f} s (at most {check.seconds:g} s)")
    if isinstance(check, MaxTokensCheck):
        tokens = result.metrics.completion_tokens
        return CheckResult(check.type, tokens <= check.tokens, f"{tokens} tokens (at most {check.tokens})")
    if result.error:
        return CheckResult(check.type, False, f"the turn failed: {result.error}", isinstance(check, JudgeCheck))
    if isinstance(check, ContainsCheck):
        found = (check.text in result.answer if check.case_sensitive
                 else check.text.casefold() in result.answer.casefold())
        return CheckResult(check.type, found, f"{'has' if found else 'lacks'} {check.text!r}")
    if isinstance(check, MatchesCheck):
        match = re.search(check.pattern, result.answer)
        return CheckResult(check.type, match is not None,
                           f"matches at {match.start()}" if match else f"no match for /{check.pattern}/")
    if isinstance(check, JsonSchemaCheck):
        return _json_schema(check.schema_, result.answer, check.type)
    assert isinstance(check, JudgeCheck)
    if judge is None:
        return CheckResult(check.type, False, "no judge model was given to this run", model_judged=True)
    meets, reason = judge(check.rubric, question, result.answer, check.judge)
    return CheckResult(check.type, meets, f"{check.judge} says: {reason}", model_judged=True)


def _tool_call(check: ToolCallCheck, result: TargetResult) -> CheckResult:
    calls = [call for call in result.calls if call.name == check.name]
    if not calls:
        made = ", ".join(call.name for call in result.calls) or "none"
        return CheckResult(check.type, False, f"no call to {check.name} (calls: {made})")
    problems = []
    for call in calls:
        if not call.parsed or call.arguments is None:
            problems.append(f"its arguments did not parse: {call.arguments_text[:200]!r}")
            continue
        wrong = {key: call.arguments.get(key) for key, value in check.arguments.items()
                 if call.arguments.get(key) != value}
        if wrong:
            problems.append(f"arguments {json.dumps(wrong, ensure_ascii=False)[:300]} (expected "
                            f"{json.dumps({k: check.arguments[k] for k in wrong}, ensure_ascii=False)[:300]})")
            continue
        if check.schema_ is not None:
            failed = _schema_problem(check.schema_, call.arguments)
            if failed:
                problems.append(failed)
                continue
        return CheckResult(check.type, True, f"called {check.name} with {json.dumps(call.arguments)[:300]}")
    return CheckResult(check.type, False, f"{check.name} was called, but " + "; ".join(problems))


def _json_schema(schema: dict[str, Any], answer: str, kind: str) -> CheckResult:
    fenced = _FENCED_JSON.search(answer)
    text = fenced.group(1) if fenced else answer.strip()
    try:
        value = json.loads(text)
    except ValueError as exc:
        return CheckResult(kind, False, f"not JSON: {exc}")
    failed = _schema_problem(schema, value)
    return CheckResult(kind, failed is None, failed or "valid JSON that matches the schema")


def _schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    try:
        validator = validators.validator_for(schema)
        validator.check_schema(schema)
        error = schema_errors.best_match(validator(schema).iter_errors(value))
    except schema_errors.SchemaError as exc:
        return f"the case's schema is not valid: {exc.message}"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the value"
    return f"{where}: {error.message}"[:300]
