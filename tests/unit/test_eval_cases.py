"""Eval cases and sets (app/evals/): written by hand in YAML, read back the same, refused whole with the place of a
mistake (a hostile file too); each kind of check decided on real answers' shapes; pass rates with Wilson
intervals."""

from __future__ import annotations

import time

import pytest

from app.compare.results import CallCheck, TargetResult
from app.domain.conversation import AnswerMetrics
from app.evals.checks import evaluate
from app.evals.files import EvalFileError, parse_set, set_to_json, set_to_yaml
from app.evals.stats import pass_rate

HAND_WRITTEN = b"""
name: Calculator
description: The Tools page's calculator, asked plainly.
cases:
  - name: multiplies
    messages:
      - {role: user, content: "What is 17 * 23?"}
    page: tools
    tools: [calculator]
    sampling: {temperature: 0.0, max_new_tokens: 64}
    checks:
      - {type: tool_call, name: calculator, arguments: {expression: "17 * 23"}}
      - {type: contains, text: "391"}
      - {type: max_latency, seconds: 30}
  - name: answers in JSON
    messages:
      - {role: system, content: Answer in JSON.}
      - {role: user, content: "Capital of France?"}
    checks:
      - type: json_schema
        schema: {type: object, required: [capital], properties: {capital: {type: string}}}
      - {type: judge, judge: SmolLM2, rubric: Names Paris as the capital.}
"""


def test_a_hand_written_set_reads_and_round_trips_through_yaml_and_json():
    read = parse_set(HAND_WRITTEN, "calculator.yaml")
    assert [case.name for case in read.cases] == ["multiplies", "answers in JSON"]
    assert read.cases[0].question == "What is 17 * 23?" and read.cases[0].checks[2].seconds == 30.0
    assert read.cases[1].model_judged and not read.cases[0].model_judged
    assert parse_set(set_to_yaml(read).encode()) == read
    assert parse_set(set_to_json(read).encode()) == read  # JSON is YAML too
    assert "schema:" in set_to_yaml(read) and "schema_" not in set_to_yaml(read)


_ONE_CASE = b"name: x\ncases:\n  - name: a\n    messages: [{role: user, content: hi}]\n    checks: "


@pytest.mark.parametrize(("raw", "said"), [
    (b"name: x\ncases: []", "cases: List should have at least 1 item"),
    (HAND_WRITTEN.replace(b"seconds: 30", b"seconds: -1"), "cases.0.checks.2.max_latency.seconds"),
    (HAND_WRITTEN.replace(b"type: contains", b"type: sounds_like"), "does not match any of the expected tags"),
    (HAND_WRITTEN.replace(b"- {role: user, content: \"Capital of France?\"}", b""), "the last message must be"),
    (HAND_WRITTEN.replace(b"type: string", b"type: strung"), "not a usable JSON Schema"),
    (_ONE_CASE + b"[{type: json_schema, schema: {$ref: '#'}}]", "lead back to themselves"),
    (_ONE_CASE + b"[{type: json_schema, schema: {$ref: 'https://example.com/s.json'}}]", "never fetched"),
    (b"name: x\ncases:\n  - name: a\n    messages: [{role: assistant, tool_calls: [{}]}, {role: user, "
     b"content: hi}]\n    checks: [{type: no_tool_call}]", "needs function.name"),
    (b"name: x\ncases: " + b"[" * 5000 + b"]" * 5000, "nests its values too deeply"),
    (_ONE_CASE + b"[{type: tool_call, name: f, arguments: {a: !!binary /w==}}]", "a value JSON cannot"),
    (_ONE_CASE + b"[{type: tool_call, name: f, arguments: {day: 2026-11-29}}]", "Quote it"),
    (_ONE_CASE + b"[{type: tool_call, name: f, arguments: {x: .nan}}]", "a value JSON cannot"),
    (HAND_WRITTEN.replace(b"name: answers in JSON", b"name: multiplies"), "two cases are named 'multiplies'"),
    (b"name: x\ncases:\n  - name: a\n    messages: [{role: user, content: hi}]\n    checks: [{type: matches, "
     b"pattern: '(unclosed'}]", "not a regular expression"),
    (b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]", "YAML alias"),
    (b"- just\n- a list", "one eval set"),
    (b"\xff\xfe not text", "not UTF-8"),
    (b"name: [unclosed", "not YAML or JSON"),
])
def test_a_file_with_a_mistake_is_refused_whole_with_its_place(raw, said):
    with pytest.raises(EvalFileError) as refused:
        parse_set(raw, "set.yaml")
    assert said in str(refused.value), str(refused.value)


def test_a_pattern_that_backtracks_without_end_fails_its_check_in_time(monkeypatch):
    monkeypatch.setenv("DEMO_SCHEMA_REGEX_TIMEOUT_S", "0.2")
    started = time.monotonic()
    slow = evaluate(_check("{type: matches, pattern: '^(a|aa)+$'}"), _result("a" * 40 + "!"))
    assert not slow.passed and "backtracks too much" in slow.detail and time.monotonic() - started < 5
    in_schema = "{type: json_schema, schema: {properties: {a: {type: string, pattern: '^(a|aa)+$'}}}}"
    assert "could not be checked" in evaluate(_check(in_schema), _result('{"a": "' + "a" * 40 + '!"}')).detail
    assert time.monotonic() - started < 10


def test_a_failed_turn_passes_no_check_and_json_types_are_not_confused():
    for check in ("{type: max_tokens, tokens: 16}", "{type: max_latency, seconds: 9}", "{type: no_tool_call}"):
        assert not evaluate(_check(check), _result(error="the backend is down", tokens=0)).passed
    flag = CallCheck("f", {"n": True}, result="", status="ok")
    assert not evaluate(_check("{type: tool_call, name: f, arguments: {n: 1}}"), _result("", [flag])).passed
    assert evaluate(_check("{type: tool_call, name: f, arguments: {n: true}}"), _result("", [flag])).passed
    number = CallCheck("f", {"n": 1.0, "xs": [1, {"k": False}]}, result="", status="ok")
    assert evaluate(_check("{type: tool_call, name: f, arguments: {n: 1, xs: [1, {k: false}]}}"),
                    _result("", [number])).passed
    assert not evaluate(_check("{type: tool_call, name: f, arguments: {xs: [1, {k: 0}]}}"),
                        _result("", [number])).passed


def _result(answer: str = "", calls: list[CallCheck] | None = None, error: str | None = None,
            seconds: float = 1.0, tokens: int = 10) -> TargetResult:
    return TargetResult(label="t", answer=answer, calls=calls or [], error=error, total_time_s=seconds,
                        generations=[AnswerMetrics(completion_tokens=tokens)], done=True)


def _check(yaml_check: str):
    text = (b"name: s\ncases:\n  - name: c\n    messages: [{role: user, content: q}]\n    checks: [" +
            yaml_check.encode() + b"]")
    return parse_set(text).cases[0].checks[0]


def test_each_check_decides_on_an_answer_and_says_why():
    good_call = CallCheck("calculator", {"expression": "17 * 23"}, result="391", status="ok")
    assert evaluate(_check("{type: tool_call, name: calculator, arguments: {expression: '17 * 23'}}"),
                    _result("391", [good_call])).passed
    wrong = evaluate(_check("{type: tool_call, name: calculator, arguments: {expression: '17 + 23'}}"),
                     _result("40", [good_call]))
    assert not wrong.passed and "17 * 23" in wrong.detail
    broken = CallCheck("calculator", None, arguments_text='{"expression": ', parsed=False)
    assert "did not parse" in evaluate(_check("{type: tool_call, name: calculator}"), _result("", [broken])).detail
    missing = evaluate(_check("{type: tool_call, name: calculator}"), _result("391"))
    assert not missing.passed and "calls: none" in missing.detail
    schema = "{type: tool_call, name: calculator, schema: {required: [expression], properties: {expression: " \
             "{type: string, pattern: '^[0-9 *]+$'}}}}"
    assert evaluate(_check(schema), _result("", [good_call])).passed
    assert not evaluate(_check("{type: no_tool_call}"), _result("", [good_call])).passed

    assert evaluate(_check("{type: contains, text: PARIS}"), _result("It is Paris.")).passed
    assert not evaluate(_check("{type: contains, text: PARIS, case_sensitive: true}"), _result("Paris")).passed
    assert evaluate(_check("{type: matches, pattern: '\\b3\\d1\\b'}"), _result("It is 391.")).passed
    json_check = _check("{type: json_schema, schema: {type: object, required: [capital]}}")
    assert evaluate(json_check, _result('Sure:\n```json\n{"capital": "Paris"}\n```')).passed
    assert "capital" in evaluate(json_check, _result('{"city": "Paris"}')).detail
    assert "not JSON" in evaluate(json_check, _result("Paris")).detail
    assert not evaluate(_check("{type: max_latency, seconds: 2}"), _result(seconds=2.5)).passed
    assert evaluate(_check("{type: max_tokens, tokens: 10}"), _result(tokens=10)).passed
    assert "the turn failed" in evaluate(_check("{type: contains, text: x}"), _result("x", error="boom")).detail

    judged = _check("{type: judge, judge: SmolLM2, rubric: Names Paris.}")
    unjudged = evaluate(judged, _result("Paris"))
    assert not unjudged.passed and unjudged.model_judged and "no judge" in unjudged.detail
    said = evaluate(judged, _result("Paris"), "Capital?", lambda rubric, question, answer, label: (True, "it does"))
    assert said.passed and said.model_judged and said.detail == "SmolLM2 says: it does"


def test_pass_rates_carry_a_wilson_interval():
    none_of_five = pass_rate(0, 5)
    assert none_of_five.rate == 0 and none_of_five.low == 0 and 0.4 < none_of_five.high < 0.45  # not 0 ± 0
    half = pass_rate(10, 20)
    assert half.low == pytest.approx(0.2993, abs=1e-3) and half.high == pytest.approx(0.7007, abs=1e-3)
    assert pass_rate(3, 3).describe() == "100% (3/3; 95% 44–100%)"
    with pytest.raises(ValueError):
        pass_rate(4, 3)
