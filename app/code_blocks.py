"""Markdown code fences around Python code: the one written around a forced code call, and any a model writes."""

from __future__ import annotations

import re

# What a forced call to a code tool writes around the code (see app.dialects.base.code_call).
CODE_FENCE_OPEN, CODE_FENCE_CLOSE = "```python\n", "```"

_FENCE = re.compile(r"^\s*```(?:python|py)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def strip_code_fence(code: str) -> str:
    """The code inside a Markdown fence that wraps all of `code` (models often add one), else `code` as it is."""
    match = _FENCE.match(code)
    return match.group(1) if match else code
