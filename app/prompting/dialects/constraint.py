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

from app.prompting.dialects.dialect import ConstrainedCall


def _literal(text: str) -> xgr.Grammar:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text, ensure_ascii=False)}")


# xgrammar's JSON numbers allow unbounded digits, and a small model under a constraint happily writes
# "10.000000000..." until it runs out of tokens. Cap the digits of integer and fraction parts (15 is all a double
# holds). If a future xgrammar spells these rules differently the replacements simply do not match.
_DIGIT_CAPS = (("[0-9]*", "[0-9]{0, 15}"), ("basic_number_digits{1, -1}", "basic_number_digits{1, 15}"))


# xgrammar's JSON strings take any character up to the closing quote, so a small model that ends an argument with the
# object's braces but without the quote goes on inside the string until it runs out of tokens: asked "What is
# 17 * 23?" with a forced calculator call, SmolLM2 wrote {"expression": "17 * 23}}  # 17 * 23 = 312.57  # 17 * ...
# for 1,024 tokens (its likeliest token after the expression is `}}`, 0.76 at temperature 0.2, against 0.23 for `"}`;
# its tokenizer splits `"}}` into `"` and `}}`). So in a string a `}` or `]` must close a `{` or `[` opened in that
# string: one that closes nothing is where the model meant the string to end, and the grammar leaves it the quote.
# Every string value can still be written: an unmatched bracket as its escape (\u007d, \u005d).
_STRING_CHAR = r'[^\0-\x1f\"\\\r\n]'  # xgrammar's: any character a JSON string may hold unescaped
_STRING_END = r'(=([ \n\r\t]* [,}\]:]))'  # xgrammar's lookahead: what may follow a string
_STRING_RULE = (rf'basic_string_sub ::= (("\"") | ({_STRING_CHAR} basic_string_sub) | ("\\" basic_escape '
                rf'basic_string_sub)) {_STRING_END}')
_PLAIN = _STRING_CHAR[:-1] + r"{}\[\]]"  # the same but for brackets
_BRACKETED_STRING_RULES = (
    # the rest of a string: an opening bracket may stay open, a closing one only ends a bracketed part
    rf'basic_string_sub ::= (("\"") | ({_PLAIN} basic_string_sub) | ("\\" basic_escape basic_string_sub)'
    rf' | ([{{\[] basic_string_sub) | ("{{" basic_string_nested "}}" basic_string_sub)'
    rf' | ("[" basic_string_nested "]" basic_string_sub)) {_STRING_END}' "\n"
    # the inside of a bracketed part: brackets matched
    rf'basic_string_nested ::= ("" | ({_PLAIN} basic_string_nested) | ("\\" basic_escape basic_string_nested)'
    rf' | ("{{" basic_string_nested "}}" basic_string_nested) | ("[" basic_string_nested "]" basic_string_nested))'
)

# Any text without three backticks in a row: the body of a fenced code block.
_FREE_TEXT_WITHOUT_FENCE = 'root ::= ([^`] | "`" [^`] | "``" [^`])*'


def call_ebnf(calls: Sequence[ConstrainedCall]) -> str:
    """Exactly one of `calls`, then the end: a forced reply makes one call (with parallel_tool_calls or without)."""
    return _capped(_unbounded_call_grammar(calls))


def reply_ebnf(calls: Sequence[ConstrainedCall], json_schema: dict[str, Any] | None) -> str:
    """A reply that is JSON (valid against `json_schema`; any JSON object without one) or one of `calls`."""
    if json_schema is None:  # OpenAI's json_object: any object, whatever its keys
        answer = xgr.Grammar.from_json_schema(json.dumps({"type": "object"}), any_whitespace=False, strict_mode=False)
    else:
        answer = xgr.Grammar.from_json_schema(json.dumps(json_schema), any_whitespace=False, strict_mode=True)
    return _capped(xgr.Grammar.union(answer, _unbounded_call_grammar(calls)) if calls else answer)


def _capped(grammar: xgr.Grammar) -> str:
    """The grammar as text, its numbers' digits capped and its strings' closing brackets matched (see above)."""
    text = str(grammar)
    for unbounded, capped in _DIGIT_CAPS:
        text = text.replace(unbounded, capped)
    return text.replace(_STRING_RULE, _BRACKETED_STRING_RULES)


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
