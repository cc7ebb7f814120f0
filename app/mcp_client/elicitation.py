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
from jsonschema import Draft202012Validator, SchemaError
from mcp import types
from mcp.client.session import ClientRequestContext

from app.tools.questions import Answer, Question, QuestionChannel

QUESTION_TIMEOUT_S = 600.0  # how long a question waits for the user before it is answered "cancel"
_MAX_FIELDS = 20
_MAX_MESSAGE = 4_000
_PRIMITIVES = {"string", "number", "integer", "boolean"}


@dataclass(eq=False)
class _Asking:
    channel: QuestionChannel
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
        """Around one call: questions that come while it runs may be its (none without a channel)."""
        if channel is None:
            yield
            return
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
        if asking is None:
            why = "no tool call of this client is running" if not self._calls else \
                f"{len(self._calls)} tool calls are running on this connection and the question names none of them"
            return _refused(f"there is no one to ask: {why}")
        problem = form_problem(params.requested_schema)
        if problem is not None:
            return _refused(f"the question cannot be shown as a form: {problem}")
        question = Question(params.message[:_MAX_MESSAGE], dict(params.requested_schema), self.source)
        try:
            asked = asking.channel.ask(question)
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
    for name, spec in fields.items():
        if not isinstance(spec, dict):
            return f"the field {name!r} is not described"
        kind = spec.get("type")
        if kind == "array":
            items = spec.get("items")
            if not isinstance(items, dict) or not (isinstance(items.get("enum"), list) or isinstance(
                    items.get("anyOf"), list)):
                return f"the field {name!r} is a list of free values, which a form cannot ask for"
        elif kind not in _PRIMITIVES:
            return f"the field {name!r} is of type {kind!r}"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"it is not a valid JSON Schema ({exc.message})"
    return None


def _result(answer: Answer) -> types.ElicitResult:
    if answer.action != "accept":
        return types.ElicitResult(action=answer.action)
    return types.ElicitResult(action="accept", content=answer.content or {})


def _refused(why: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=f"Elicitation refused: {why}.")
