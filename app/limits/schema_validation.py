"""The one way to validate against a JSON Schema that came from outside the app: an MCP server's tool parameters,
output schema or question, an API client's tool or response format. Every jsonschema validator in the app is built
here (`SchemaValidator`, `check_schema`), so that none of them can be made to fetch a URL or to hang the process:

- A `$ref` resolves inside the schema only (an empty `referencing.Registry`). jsonschema's default registry fetches
  whatever URL a schema names, with only a warning, and the fetched value showed in the error message.
- The regular expressions (`pattern`, the keys of `patternProperties`, and these again where `additionalProperties`
  stands next to them) run on the `regex` package, with the GIL released, under one limit of CPU time for the
  whole validation (SchemaLimits.regex_timeout_s; on a busy machine the wall time is longer, while the other threads
  run). Python's `re` backtracks without bound while holding the GIL: `^(a+)+$` against 24 a's and a "!" held it
  0.5-0.9 s, twice that with each further character, and every user of the process froze with it. A value that
  cannot be checked in time is an error that says so, never a pass.
- `unevaluatedProperties` next to `patternProperties` is refused as a schema: jsonschema matches those regexes
  with `re` deep inside its own code, out of reach of the limit above.

A schema's `$schema` picks the draft (2020-12 when it names none, as MCP says).
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Iterator, Mapping
from typing import Any

import regex
from jsonschema import Draft202012Validator, SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from app.config import SchemaLimits

# The regex time limit of the validation under way, and when (time.monotonic()) its regexes must be done.
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar("schema_regexes", default=None)


class _RegexFailed(Exception):
    """A regex of the schema could not be run: it ends the validation (what `reason` says is the error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema regexes are not anchored), within what is left of
    the validation's time; _RegexFailed past it."""
    limit, deadline = _DEADLINE.get() or (SchemaLimits.from_env().regex_timeout_s, None)
    left = limit if deadline is None else deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError
        return _compiled(pattern).search(text, timeout=left, concurrent=True) is not None  # concurrent: no GIL held
    except regex.error as exc:
        raise _RegexFailed(f"the pattern {pattern[:100]!r} cannot be used: {exc}") from None
    except TimeoutError:
        raise _RegexFailed(f"the value could not be checked against the pattern {pattern[:100]!r} within {limit:g} "
                           "s: the schema's regular expression backtracks too much; its author should simplify it"
                           ) from None


# The keywords whose regexes jsonschema runs with `re`, as it words them, matched with `_search` instead.

def _pattern(validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    patterns = schema.get("patternProperties") or {}
    if not patterns:  # no regex involved: jsonschema's own
        yield from Draft202012Validator.VALIDATORS["additionalProperties"](validator, additional, instance, schema)
        return
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = [key for key in instance
              if key not in properties and not any(_search(pattern, key) for pattern in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        verb = "does" if len(extras) == 1 else "do"
        joined = ", ".join(repr(each) for each in sorted(extras))
        yield ValidationError(f"{joined} {verb} not match any of the regexes: "
                              f"{', '.join(repr(each) for each in sorted(patterns))}")


_BOUNDED = {"pattern": _pattern, "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties}


_BY_DRAFT: dict[str, type[Validator]] = {}


def _bounded(draft: type[Validator]) -> type[Validator]:
    """`draft` with its regex keywords bounded (one class per draft, made once)."""
    key = draft.META_SCHEMA.get("$id") or draft.META_SCHEMA.get("id") or repr(draft)
    if key not in _BY_DRAFT:
        keywords = {name: function for name, function in _BOUNDED.items() if name in draft.VALIDATORS}
        _BY_DRAFT[key] = extend(draft, keywords)
    return _BY_DRAFT[key]


def _draft(schema: Any) -> type[Validator]:
    draft: type[Validator] = Draft202012Validator
    if isinstance(schema, Mapping) and isinstance(schema.get("$schema"), str):
        draft = validator_for(schema, default=Draft202012Validator)
    return draft


def check_schema(schema: Any) -> None:
    """Raise SchemaError unless `schema` is a valid JSON Schema of its draft that this module can bound."""
    _draft(schema).check_schema(schema)
    if _mixes_unevaluated_and_patterns(schema):
        raise SchemaError("unevaluatedProperties cannot be used together with patternProperties here (their regexes "
                          "could not be checked under a time limit); use additionalProperties instead")


def _mixes_unevaluated_and_patterns(schema: Any) -> bool:
    """Whether `unevaluatedProperties` and `patternProperties` both appear somewhere in `schema` (iterative: a schema
    may be deep)."""
    seen: set[str] = set()
    pending = [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            seen.update(key for key in ("unevaluatedProperties", "patternProperties") if key in item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return len(seen) == 2


class SchemaValidator:
    """A validator for one schema from outside (see the module's docstring). SchemaError when it is not a valid
    JSON Schema; `errors` and `is_valid` never fetch anything and take at most about
    SchemaLimits.regex_timeout_s in regexes, in whatever thread they run."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        check_schema(schema)
        self.schema = schema
        self._validator = _bounded(_draft(schema))(schema, registry=Registry())

    def errors(self, instance: Any, *, first_only: bool = False) -> list[ValidationError]:
        """What is wrong with `instance`, ordered by where in it (empty when it is valid). A regex that cannot run in
        time is one more error that says so, and ends the check. SchemaError when the schema needs a `$ref` from
        outside itself, or its references go round without end."""
        found: list[ValidationError] = []
        limit = SchemaLimits.from_env().regex_timeout_s
        token = _DEADLINE.set((limit, time.monotonic() + limit))
        try:
            for error in self._validator.iter_errors(instance):
                found.append(error)
                if first_only:
                    break
        except _RegexFailed as exc:
            found.append(ValidationError(exc.reason, validator="pattern"))
        except Unresolvable as exc:
            raise SchemaError(f"it refers to {str(getattr(exc, 'ref', exc))[:200]!r}, which is not inside it "
                              "(references outside a schema are never fetched)") from None
        except RecursionError:  # {"$ref": "#"}: a reference back to itself, followed without end
            raise SchemaError("its references lead back to themselves without end") from None
        finally:
            _DEADLINE.reset(token)
        return sorted(found, key=lambda error: [str(part) for part in error.path])

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        """`errors`, for code written against jsonschema's validators (the MCP SDK's result check)."""
        return iter(self.errors(instance))

    def is_valid(self, instance: Any) -> bool:
        """Whether `instance` is valid (SchemaError as for `errors`)."""
        return not self.errors(instance, first_only=True)


def describe(error: ValidationError) -> str:
    """An error as one line: where in the value (a/b/0) and what."""
    where = "/".join(str(part) for part in error.path)
    return f"{where}: {error.message}" if where else error.message
