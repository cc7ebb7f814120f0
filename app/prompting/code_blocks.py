"""Markdown code fences around Python code: the one written around a forced code call, and any a model writes."""

from __future__ import annotations

import re

# What a forced call to a code tool writes around the code (see app.prompting.dialects.dialect.code_call).
CODE_FENCE_OPEN, CODE_FENCE_CLOSE = "```python\n", "```"

# The opening fence and the whitespace after it. Matched greedily once, with no backtracking into the code: a
# single regular expression over the whole fenced block took quadratic time on long runs of blank lines.
_OPENING = re.compile(r"\s*```(?:python|py)?(\s*)")


def strip_code_fence(code: str) -> str:
    """The code inside a Markdown fence that wraps all of `code` (models often add one), else `code` as it is.
    Blank lines right after the opening fence and one newline before the closing fence are not part of the code."""
    opening = _OPENING.match(code)
    if opening is None:
        return code
    last_newline = opening.group(1).rfind("\n")
    if last_newline < 0:  # the language tag runs on ("```python3") or there is no line break after the fence
        return code
    start = opening.start(1) + last_newline + 1
    end = len(code.rstrip()) - len(CODE_FENCE_CLOSE)
    if end < start or not code.rstrip().endswith(CODE_FENCE_CLOSE):
        return code
    body = code[start:end]
    return body[:-1] if body.endswith("\n") else body
