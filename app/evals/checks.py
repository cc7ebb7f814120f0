"""One check of one answer (cases.py): passed or not, and a line saying why. An answer is what the compare runner
read off a turn's events (app/compare/results.py, TargetResult): its text, its tool calls as they parsed, and its
figures. A `judge` check asks a model, through the `judge` callable the runner gives."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex
from jsonschema import SchemaError

from app.compare.results import TargetResult
from app.config import SchemaLimits
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
from app.limits.schema_validation import SchemaValidator

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
    """Whether `result` passes `check`. A turn that ended in an error passes no check at all: with the backend down,
    "at most 16 tokens" must not pass."""
    if result.error:
        return CheckResult(check.type, False, f"the turn failed: {result.error}", isinstance(check, JudgeCheck))
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
    if isinstance(check, ContainsCheck):
        found = (check.text in result.answer if check.case_sensitive
                 else check.text.casefold() in result.answer.casefold())
        return CheckResult(check.type, found, f"{'has' if found else 'lacks'} {check.text!r}")
    if isinstance(check, MatchesCheck):
        return _matches(check, result.answer)
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
                 if key not in call.arguments or not _same(call.arguments[key], value)}
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


def _same(given: Any, expected: Any) -> bool:
    """JSON equality: `true` is not 1, nor 1 `true` (Python's == says they are); 1 and 1.0 are the same number."""
    if isinstance(given, bool) or isinstance(expected, bool):
        return type(given) is type(expected) and given == expected
    if isinstance(expected, dict):
        return (isinstance(given, dict) and given.keys() == expected.keys()
                and all(_same(given[key], expected[key]) for key in expected))
    if isinstance(expected, list):
        return (isinstance(given, list) and len(given) == len(expected)
                and all(_same(a, b) for a, b in zip(given, expected, strict=True)))
    return bool(given == expected)


def _matches(check: MatchesCheck, answer: str) -> CheckResult:
    limit = SchemaLimits.from_env().regex_timeout_s
    try:
        # concurrent: the GIL is let go while it searches, so a slow pattern holds up no other user
        match = regex.compile(check.pattern).search(answer, timeout=limit, concurrent=True)
    except TimeoutError:
        return CheckResult(check.type, False, f"/{check.pattern[:100]}/ took over {limit:g} s on the answer (it "
                                              "backtracks too much): simplify the pattern")
    except regex.error as exc:
        return CheckResult(check.type, False, f"the pattern cannot be used: {exc}")
    return CheckResult(check.type, match is not None,
                       f"matches at {match.start()}" if match else f"no match for /{check.pattern[:100]}/")


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
    """What is wrong with `value`, through the app's bounded validator (no fetched `$ref`, regexes under a time
    limit); None when it is valid."""
    try:
        errors = SchemaValidator(schema).errors(value, first_only=True)
    except SchemaError as exc:
        return f"the case's schema cannot be used: {exc.message}"
    if not errors:
        return None
    where = "/".join(str(part) for part in errors[0].absolute_path) or "the value"
    return f"{where}: {errors[0].message}"[:300]
