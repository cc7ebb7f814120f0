"""A running tool's question to the user (an MCP server's elicitation, app/tools/questions.py) as a form in the chat.

When a call asks, the turn pauses with the call still running (app/agent/loop.py QuestionAsked): this session keeps the
running call by its id, the page draws the question as a form where the call's card would be, and the answer goes
back to the server; then the turn goes on, waiting for the call's result (state.request_resume with the running
call). Stop (under the form) cancels the call instead. The question lives in this browser session only: after a
refresh the call shows as waiting, to be run again or denied (the server's side gives up on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import streamlit as st
from jsonschema import SchemaError

from app.agent.loop import Decision
from app.domain.conversation import ToolCall
from app.frontends.streamlit import state
from app.frontends.streamlit.mcp_settings import plain
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.limits.schema_validation import SchemaValidator
from app.tools.questions import Answer, answer
from app.tools.tool_registry import RunningCall

_N = TypeVar("_N", int, float)
_SUSPENDED = "_suspended_calls"  # per page: call id -> _Suspended


@dataclass(eq=False)
class _Suspended:
    running: RunningCall
    decisions: dict[str, Decision] = field(default_factory=dict)  # on the answer's other calls, not yet run
    problem: str = ""  # why the last answer could not be sent


def remember(page: str, call_id: str, running: RunningCall, decisions: Mapping[str, Decision] | None) -> None:
    """Keep a call that waits for the user's answer (and the decisions on the calls after it) for the next runs."""
    _suspended(page)[call_id] = _Suspended(running, dict(decisions or {}))


def held(page: str, call_id: str) -> bool:
    """Whether this session holds the call, which asked the user something (`render` shows where it stands)."""
    return call_id in _suspended(page)


def any_held(page: str) -> bool:
    return bool(_suspended(page))


def cancel_all(page: str) -> None:
    """Stop every call of this page that waits for an answer (the user pressed Stop)."""
    for held in _suspended(page).values():
        held.running.cancel()
    state.replace_per_page(_SUSPENDED, page, {})


def render(page: str, call: ToolCall) -> None:
    """The question of a call this session `held`, as a form: Send (the answers), Decline. A call that went on
    without the answer (its question timed out, or it ended) offers to continue the turn with its result."""
    held = _suspended(page)[call.id]
    asked = held.running.questions.pending
    if asked is None:
        with st.container(border=True, key=f"question/{page}/{call.id}"):
            st.caption(safe_label(f"{call.name} asked you something, and went on without your answer."))
            st.button("Continue", key=f"question_continue/{page}/{call.id}", icon=":material/play_arrow:",
                      on_click=_continue, args=(page, call.id))
        return
    question = asked.question
    with st.container(border=True, key=f"question/{page}/{call.id}"):
        st.markdown(safe_markdown(f":material/contact_support: **{call.name}** asks you"))
        st.caption(safe_label(f"{question.source} · your answer goes back to it, not to the model"))
        st.text(question.message)  # the server's words, shown as they are
        if held.problem:
            st.error(safe_markdown(held.problem), icon=":material/error:")
        with st.form(key=f"question_form/{page}/{call.id}", border=False):
            fields = question.schema.get("properties", {})
            required = set(question.schema.get("required", []))
            for name, spec in fields.items():
                try:
                    _field(_key(page, call.id, name), name, spec, name in required)
                except Exception:  # a form the checks let through but a widget refuses: a text field instead
                    st.text_input(safe_label(name), key=_key(page, call.id, name) + "/text")
            with st.container(horizontal=True, gap="small"):
                st.form_submit_button("Send", type="primary", icon=":material/send:", on_click=_send,
                                      args=(page, call.id, "accept"))
                st.form_submit_button("Decline", icon=":material/block:", on_click=_send,
                                      args=(page, call.id, "decline"))


def _field(key: str, name: str, spec: dict[str, Any], required: bool) -> None:
    """One answer field, drawn from its JSON Schema (MCP form mode: string, number, integer, boolean, enums)."""
    label = safe_label(str(spec.get("title") or name) + (" *" if required else ""))
    help_text = plain(str(spec.get("description") or "")[:1_000]) or None  # a server's words: never markdown
    default = spec.get("default")
    kind = spec.get("type")
    choices, titles = _choices(spec)
    if kind == "array":
        items = spec["items"] if isinstance(spec.get("items"), dict) else {}
        options, names = _choices(items)
        st.multiselect(label, options, default=[v for v in default or [] if v in options], key=key, help=help_text,
                       format_func=lambda value: names.get(value, str(value)))
    elif choices:
        st.selectbox(label, choices, index=choices.index(default) if default in choices else None, key=key,
                     help=help_text, format_func=lambda value: titles.get(value, str(value)))
    elif kind == "boolean":
        st.checkbox(label, value=bool(default), key=key, help=help_text)
    elif kind == "integer":
        st.number_input(label, value=_number(default, int), min_value=_number(spec.get("minimum"), int),
                        max_value=_number(spec.get("maximum"), int), step=1, key=key, help=help_text)
    elif kind == "number":
        st.number_input(label, value=_number(default, float), min_value=_number(spec.get("minimum"), float),
                        max_value=_number(spec.get("maximum"), float), key=key, help=help_text)
    else:
        st.text_input(label, value=str(default) if isinstance(default, str) else "", key=key, help=help_text,
                      max_chars=spec.get("maxLength") if isinstance(spec.get("maxLength"), int) else None)


def _number(value: Any, kind: type[_N]) -> _N | None:
    """A schema's number as the field's type (int for an integer field), None when it gives none."""
    return kind(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _choices(spec: dict[str, Any]) -> tuple[list[Any], dict[Any, str]]:
    """An enum's values and their titles (plain `enum`, or `oneOf`/`anyOf` of {"const", "title"})."""
    if isinstance(spec.get("enum"), list):
        return list(spec["enum"]), {}
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options):
        return [o["const"] for o in options], {o["const"]: str(o.get("title") or o["const"]) for o in options}
    return [], {}


def _send(page: str, call_id: str, action: str) -> None:
    held = _suspended(page).get(call_id)
    asked = held.running.questions.pending if held is not None else None
    if held is None or asked is None:
        return  # answered already, or the call ended: the page shows where it stands
    content = None
    if action == "accept":
        content = _content(page, call_id, asked.question.schema)
        problem = _problem(asked.question.schema, content)
        if problem:
            held.problem = f"Not sent: {problem}"
            return
    answer(asked, Answer("accept" if action == "accept" else "decline", content))
    del _suspended(page)[call_id]
    state.request_resume(page, held.decisions, running={call_id: held.running})


def _continue(page: str, call_id: str) -> None:
    held = _suspended(page).pop(call_id, None)
    if held is not None:
        state.request_resume(page, held.decisions, running={call_id: held.running})


def _content(page: str, call_id: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The form's values, leaving out the fields left empty."""
    content: dict[str, Any] = {}
    for name in schema.get("properties", {}):
        key = _key(page, call_id, name)
        value = st.session_state.get(key, st.session_state.get(key + "/text"))
        if value is None or value == "" or value == []:
            continue
        content[name] = value
    return content


def _problem(schema: dict[str, Any], content: dict[str, Any]) -> str:
    """What is wrong with the answers, in the user's words ("" when nothing)."""
    fields = schema.get("properties", {})
    missing = [str(fields[n].get("title") or n) for n in schema.get("required", []) if n in fields and n not in content]
    if missing:
        return f"fill in {', '.join(missing)}."
    # The server's schema: app/limits/schema_validation.py fetches no $ref it names and bounds its regexes (checked when
    # it asked: app/mcp_client/elicitation.py form_problem).
    try:
        errors = SchemaValidator(schema).errors(content)
    except SchemaError as exc:
        return f"the question's form cannot be checked: {exc.message}; decline it."
    if errors:
        where = ".".join(str(p) for p in errors[0].path)
        return f"{where + ': ' if where else ''}{errors[0].message}."
    return ""


def _key(page: str, call_id: str, name: str) -> str:
    return f"question_field/{page}/{call_id}/{name}"


def _suspended(page: str) -> dict[str, _Suspended]:
    held: dict[str, _Suspended] = state.per_page(_SUSPENDED, page, dict)
    return held
