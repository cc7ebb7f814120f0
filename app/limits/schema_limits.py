"""Size limits on a JSON Schema that a grammar will be built from, checked in one cheap pass before any other work.

Building and compiling a grammar grows steeply with what a schema holds, not with its byte size alone: 10,000 enum
values took 3.7 s to compile and 100,000 over 7 minutes, 3,000 `anyOf` alternatives 33 s, a 1,900-character
`pattern` 2.8 s, a 10-character `a{1,50000}` never finished (SmolLM2's vocabulary, this project's 2-core test
machine). Validating the schema itself against its meta-schema (jsonschema, pure Python) took 8 s for 640 KB.
Each of these is bounded here (`SchemaLimits`), so that what passes compiles in about a second at most.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.config import SchemaLimits

# A regex repetition count: {n}, {n,} or {n,m}. xgrammar unrolls these, and a 10-character `a{1,50000}` did not
# finish building its grammar in 20 s; counts up to 100 build in milliseconds.
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
MAX_REPEAT = 100
# Length and count bounds are unrolled too: maxLength 100,000 alone took 2.2 s to compile.
MAX_BOUND = 10_000
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")

def schema_size_problem(schema: Any, limits: SchemaLimits) -> str | None:
    """Why `schema` is too large to build a grammar from (bytes, values, nesting, enum values, regex length), or
    None. Iterative and linear: it must stay cheap on exactly the schemas it refuses."""
    nodes, enum_values, deepest = 0, 0, 0
    pending: list[tuple[Any, int]] = [(schema, 1)]
    while pending:
        item, depth = pending.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            return f"the JSON Schema has more than {limits.max_nodes} values (objects, arrays, strings, numbers)"
        if isinstance(item, list):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            deepest = max(deepest, depth)
            problem = _keyword_problem(item, limits)
            if problem:
                return problem
            enum = item.get("enum")
            enum_values += (len(enum) if isinstance(enum, list) else 0) + ("const" in item)
            if enum_values > limits.max_enum:
                return f"the JSON Schema has more than {limits.max_enum} enum and const values"
            pending.extend((child, depth + 1) for child in item.values())
    if deepest > limits.max_depth:
        return f"the JSON Schema nests more than {limits.max_depth} objects and arrays"
    size = len(json.dumps(schema, ensure_ascii=False).encode())  # bounded: at most max_nodes values
    if size > limits.max_bytes:
        return f"the JSON Schema is larger than {limits.max_bytes} bytes as JSON"
    return None


def _keyword_problem(item: dict[str, Any], limits: SchemaLimits) -> str | None:
    """A regular expression (a `pattern`, a key of `patternProperties`) longer than the limit, or repeating
    something more than MAX_REPEAT times; a length or count bound over MAX_BOUND."""
    for bound in _BOUNDS:
        value = item.get(bound)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > MAX_BOUND:
            return f"{bound} in the JSON Schema is over {MAX_BOUND}"
    patterns = [item["pattern"]] if isinstance(item.get("pattern"), str) else []
    if isinstance(item.get("patternProperties"), dict):
        patterns += [key for key in item["patternProperties"] if isinstance(key, str)]
    for pattern in patterns:
        if len(pattern) > limits.max_pattern:
            return f"a pattern in the JSON Schema is longer than {limits.max_pattern} characters"
        counts = (int(number) for match in _REPEAT.finditer(pattern) for number in match.groups() if number)
        if any(count > MAX_REPEAT for count in counts):
            return f"a pattern in the JSON Schema repeats something more than {MAX_REPEAT} times ({{n,m}})"
    return None
