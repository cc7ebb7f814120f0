"""Forcing a tool call (tool_choice "required" or a named tool) or a JSON answer (response_format) with a grammar.

The grammar is built with xgrammar from the dialect's exact call text: literal prefix, the tool's JSON Schema,
literal suffix, one alternative per allowed tool. `ebnf()` gives the same grammar as text, which is what vLLM's
structured outputs accept, so every local backend constrains calls identically.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import xgrammar as xgr

from app.dialects.base import ConstrainedCall


def _literal(text: str) -> xgr.Grammar:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text, ensure_ascii=False)}")


# xgrammar's JSON numbers allow unbounded digits, and a small model under a constraint happily writes
# "10.000000000..." until it runs out of tokens. Cap the digits of integer and fraction parts (15 is all a double
# holds). If a future xgrammar spells these rules differently the replacements simply do not match.
_DIGIT_CAPS = (("[0-9]*", "[0-9]{0, 15}"), ("basic_number_digits{1, -1}", "basic_number_digits{1, 15}"))


# Any text without three backticks in a row: the body of a fenced code block.
_FREE_TEXT_WITHOUT_FENCE = 'root ::= ([^`] | "`" [^`] | "``" [^`])*'


def call_ebnf(calls: Sequence[ConstrainedCall]) -> str:
    return _capped(_unbounded_call_grammar(calls))


def reply_ebnf(calls: Sequence[ConstrainedCall], json_schema: dict[str, Any] | None) -> str:
    """A reply that is JSON (valid against `json_schema`; any JSON object without one) or one of `calls`."""
    if json_schema is None:  # OpenAI's json_object: any object, whatever its keys
        answer = xgr.Grammar.from_json_schema(json.dumps({"type": "object"}), any_whitespace=False, strict_mode=False)
    else:
        answer = xgr.Grammar.from_json_schema(json.dumps(json_schema), any_whitespace=False, strict_mode=True)
    return _capped(xgr.Grammar.union(answer, _unbounded_call_grammar(calls)) if calls else answer)


def _capped(grammar: xgr.Grammar) -> str:
    text = str(grammar)
    for unbounded, capped in _DIGIT_CAPS:
        text = text.replace(unbounded, capped)
    return text


def _unbounded_call_grammar(calls: Sequence[ConstrainedCall]) -> xgr.Grammar:
    if not calls:
        raise ValueError("a constrained call needs at least one tool")
    alternatives = []
    for call in calls:
        parts = [_literal(call.prefix)] if call.prefix else []
        if call.body_argument:
            parts.append(xgr.Grammar.from_ebnf(_FREE_TEXT_WITHOUT_FENCE))
        else:
            parts.append(xgr.Grammar.from_json_schema(json.dumps(call.schema), any_whitespace=False, strict_mode=True))
        if call.suffix:
            parts.append(_literal(call.suffix))
        alternatives.append(xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0])
    return xgr.Grammar.union(*alternatives) if len(alternatives) > 1 else alternatives[0]
