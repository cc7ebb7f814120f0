"""An MCP server's questions to the user during a tool call (elicitation, form mode), routed to the call that asked.

The SDK hands a server's `elicitation/create` request to one callback per connection, without saying which of the
connection's requests it belongs to (in the protocol's older versions it arrives apart from the call; with
2026-07-28's multi-round-trip requests it comes inside the call). So each call in flight registers here with its
QuestionChannel (app/tools/questions.py): the call whose task the question comes in, else the only call in flight
that can ask. A question nobody can be sure to own is refused rather than shown to the wrong user.

While the user thinks, the call's time limit stands still; the answer itself has QUESTION_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from jsonschema import SchemaError
from mcp import types
from mcp.client.session import ClientRequestContext

from app.limits.schema_validation import check_schema
from app.tools.questions import Answer, Question, QuestionChannel

QUESTION_TIMEOUT_S = 600.0  # how long a question waits for the user before it is answered "cancel"
_MAX_FIELDS = 20
_MAX_MESSAGE = 4_000
_PRIMITIVES = {"string", "number", "integer", "boolean"}
_SAFE_INTEGER = 2**53 - 1  # what a browser's number input holds exactly


@dataclass(eq=False)
class _Asking:
    channel: QuestionChannel | None  # None: a request that cannot ask the user (not a tool call of a page)
    scope: anyio.CancelScope  # the call's time limit, paused while a question waits


_CURRENT: contextvars.ContextVar[_Asking | None] = contextvars.ContextVar("mcp_asking_call", default=None)


class Askers:
    """One connection's calls in flight that may ask the user."""

    def __init__(self, source: str) -> None:
        self.source = source  # "MCP server NAME", shown with the question
        self._calls: dict[int, _Asking] = {}
        self._numbers = itertools.count()

    @contextmanager
    def calling(self, channel: QuestionChannel | None, scope: anyio.CancelScope) -> Iterator[None]:
        """Around every request on the connection: questions that come while it runs may be its (a request without
        a channel, such as a prompt or resource read, cannot take one, and makes a question nobody's)."""
        number, asking = next(self._numbers), _Asking(channel, scope)
        self._calls[number] = asking
        token = _CURRENT.set(asking)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            del self._calls[number]

    async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams
                     ) -> types.ElicitResult | types.ErrorData:
        """The SDK's elicitation callback: the question shown to the user of the call that asked; their answer."""
        if not isinstance(params, types.ElicitRequestFormParams):
            return _refused("this client answers form questions only, not URL ones")
        asking = _CURRENT.get() or (next(iter(self._calls.values())) if len(self._calls) == 1 else None)
        if asking is None or asking.channel is None:
            if not self._calls:
                why = "no tool call of this client is running"
            elif asking is not None:
                why = "the request it came with is not a tool call a user watches"
            else:
                why = f"{len(self._calls)} requests are running on this connection and the question names none of them"
            return _refused(f"there is no one to ask: {why}")
        problem = form_problem(params.requested_schema)
        if problem is not None:
            return _refused(f"the question cannot be shown as a form: {problem}")
        question = Question(params.message[:_MAX_MESSAGE], dict(params.requested_schema), self.source)
        channel = asking.channel
        try:
            asked = channel.ask(question)
        except RuntimeError as exc:
            return _refused(str(exc))
        deadline, asking.scope.deadline = asking.scope.deadline, math.inf  # the user's time is not the tool's
        started = anyio.current_time()
        try:
            with anyio.move_on_after(QUESTION_TIMEOUT_S):
                answer: Answer = await asyncio.wrap_future(asked.answer)
                return _result(answer)
            asked.answer.cancel()
            return types.ElicitResult(action="cancel")
        finally:
            asking.scope.deadline = deadline + (anyio.current_time() - started)


def form_problem(schema: Any) -> str | None:
    """Why a requested schema is not a form this client shows (MCP allows a flat object of primitive fields, and
    arrays of enum strings), or None."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "it is not an object schema"
    fields = schema.get("properties")
    if not isinstance(fields, dict) or not fields:
        return "it has no fields"
    if len(fields) > _MAX_FIELDS:
        return f"it has {len(fields)} fields (at most {_MAX_FIELDS})"
    if _refers(schema):  # a form needs none, and a $ref to a URL must never be fetched (nor shown)
        return "it refers to other schemas ($ref), which a form does not follow"
    try:
        check_schema(schema)
    except SchemaError as exc:
        return f"it is not a valid JSON Schema ({exc.message})"
    for name, spec in fields.items():
        problem = _field_problem(spec)
        if problem is not None:
            return f"the field {name!r} {problem}"
    return None


def _refers(schema: Any) -> bool:
    """Whether a `$ref` or `$dynamicRef` appears anywhere in `schema` (iterative: it may be deep)."""
    pending = [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if "$ref" in item or "$dynamicRef" in item:
                return True
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _field_problem(spec: Any) -> str | None:
    """Why one field cannot be a form widget (its type, its choices, its bounds and default), or None."""
    if not isinstance(spec, dict):
        return "is not described"
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        if not isinstance(items, dict) or _choice_values(items) is None:
            return "is a list of free values, which a form cannot ask for"
        default = spec.get("default", [])
        if not isinstance(default, list) or not all(_primitive(v) for v in default):
            return "has a default that is not a list of choices"
        return None
    if kind not in _PRIMITIVES:
        return f"is of type {kind!r}"
    choices = _choice_values(spec)
    if choices is not None and not choices:
        return "offers no choice"
    if "default" in spec and not _fits(kind, spec["default"]):
        return f"has a default that is not a {kind}"
    if kind in ("number", "integer"):
        low, high = spec.get("minimum"), spec.get("maximum")
        bounds = [v for v in (low, high, spec.get("default")) if v is not None]
        if any(not _fits(kind, v) or abs(v) > _SAFE_INTEGER for v in bounds):
            return "has bounds or a default a form cannot hold"
        if low is not None and high is not None and low > high:
            return "has a minimum above its maximum"
        default = spec.get("default")
        if default is not None and ((low is not None and default < low) or (high is not None and default > high)):
            return "has a default outside its bounds"
    return None


def _choice_values(spec: dict[str, Any]) -> list[Any] | None:
    """The values of an enum field (plain `enum`, or `oneOf`/`anyOf` of consts), None when it is not one; a
    choice that is not a plain value (an object, a list) makes it no usable enum ([])."""
    if "enum" in spec:
        values = spec["enum"] if isinstance(spec["enum"], list) else []
    elif isinstance(spec.get("oneOf") or spec.get("anyOf"), list):
        options: list[Any] = spec.get("oneOf") or spec.get("anyOf") or []
        if not all(isinstance(o, dict) and "const" in o for o in options):
            return None if spec.get("type") != "array" else []
        values = [o["const"] for o in options]
    else:
        return None
    return values if all(_primitive(v) for v in values) and len(set(map(repr, values))) == len(values) else []


def _primitive(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and not (isinstance(value, float) and value != value)


def _fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and value == value
    return isinstance(value, str)


def _result(answer: Answer) -> types.ElicitResult:
    if answer.action != "accept":
        return types.ElicitResult(action=answer.action)
    return types.ElicitResult(action="accept", content=answer.content or {})


def _refused(why: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=f"Elicitation refused: {why}.")
