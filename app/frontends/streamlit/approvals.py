"""The cards of tool calls that wait for the user (app/agent/loop.py pending_calls): each with its tool's annotations
and arguments, and Run, Edit and Deny; Stop under them ends the turn instead.

The waiting calls are part of the stored conversation (an answer whose calls have no results yet), so the cards come
back after a refresh or a restart. The user's decisions are collected here, one call at a time; once every call that
asks has one, the page goes on with the turn (state.request_resume -> chat_page -> live_turn -> resume_turn).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from app.agent.loop import Decision, ToolSettings, pending_calls, stop_pending
from app.domain.conversation import Conversation, ToolCall
from app.frontends.streamlit import question_forms as questions
from app.frontends.streamlit import state, tool_cards
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.tools.tool_registry import Tool

_DECISIONS = "_decisions"  # per page: call id -> Decision, until the turn goes on
_PROBLEMS = "_approval_problems"  # per page: call id -> why its decision could not be taken
TURN_PROBLEM = ""  # the key of a problem with the decisions as a whole (resume_turn refused them)


def render(page: str, conversation: Conversation, calls: Sequence[ToolCall], tools: ToolSettings | None) -> None:
    """The waiting calls' cards, at the end of the answer that made them."""
    if len({call.id for call in calls}) < len(calls):  # ids come from servers and imports: no card can tell them
        st.error("These tool calls share an id, so they cannot be run or denied one by one: press Stop, then send "
                 "your message again.", icon=":material/error:")
        st.button("Stop", key=f"approval_stop/{page}", icon=":material/stop_circle:", on_click=_stop,
                  args=(page, conversation))
        return
    decisions = _decisions(page, calls)
    problems = _problems(page)
    asking = {call.id for call in tools.needs_approval(calls, conversation)} if tools is not None \
        else {c.id for c in calls}
    # While one call waits for an answer to its question, or the turn is about to go on, the others wait as they are.
    frozen = questions.any_held(page) or state.turn_requested(page)
    for call in calls:
        if questions.held(page, call.id):
            questions.render(page, call)  # it runs, and asks the user something
            continue
        tool = tools.offered.get(call.name) if tools is not None else None
        with st.container(border=True, key=f"approval/{page}/{call.id}"):
            why = tools.why_asking(call, conversation) if tools is not None and call.id in asking else None
            _header(call, tool, asking=call.id in asking, why=why)
            tool_cards.arguments(call)
            if problem := problems.get(call.id):
                st.error(safe_markdown(problem), icon=":material/error:")
            decided = decisions.get(call.id)
            if frozen:
                st.caption("Waits for the call above." if questions.any_held(page) else "Going on...")
            elif decided is None:
                _actions(page, conversation, call, tools)
            else:
                _decided(page, call, decided)
    if problem := problems.get(TURN_PROBLEM):
        st.error(safe_markdown(problem), icon=":material/error:")
    st.button("Stop", key=f"approval_stop/{page}", icon=":material/stop_circle:", on_click=_stop,
              args=(page, conversation), disabled=state.turn_requested(page),
              help="End this turn: the waiting calls do not run, and the model does not go on. You can send a new "
              "message afterwards.")


@dataclass(frozen=True)
class MessageBox:
    placeholder: str
    disabled: bool


def message_box(placeholder: str, conversation: Conversation) -> MessageBox:
    """The message box is off while calls wait: a message now would leave them without results, which no model
    expects. Its placeholder says what to do instead."""
    waiting = pending_calls(conversation)
    if not waiting:
        return MessageBox(placeholder, disabled=False)
    names = ", ".join(dict.fromkeys(call.name for call in waiting))
    return MessageBox(f"Decide on the call to {names} above (Run, Edit or Deny), or press Stop", disabled=True)


def remember_problem(page: str, problem: str, call_id: str = TURN_PROBLEM) -> None:
    """Show `problem` on the cards (on the call's, given its id) at the next run."""
    _problem_map(page)[call_id] = problem


def _header(call: ToolCall, tool: Tool | None, *, asking: bool, why: str | None = None) -> None:
    title = tool.hints.title if tool is not None and tool.hints.title else call.name
    verb = "wants to run" if asking else "runs with the calls you decide on"
    st.markdown(safe_markdown(f":material/front_hand: **{title}** {verb}"))
    if why and why != "its run policy is Ask":
        st.warning(safe_markdown(f"Asking because {why}. A web page or document may be steering the model: run it "
                                 "only if you meant to send this."), icon=":material/shield:")
    notes = _notes(tool) if tool is not None else ["switched off or set to Never: it can only be denied"]
    st.caption(safe_label(" · ".join([call.name if title != call.name else "", *notes]).strip(" ·")))


def _notes(tool: Tool) -> list[str]:
    """What the tool says about itself (its annotations, MCP's defaults for what it leaves unsaid), and whose it is."""
    hints, said = tool.hints.effective, tool.hints
    notes = ["read-only" if hints.read_only else "destructive" if hints.destructive else "changes things"]
    if not hints.read_only and hints.idempotent:
        notes.append("idempotent")
    notes.append("open world" if hints.open_world else "closed world")
    if (said.read_only, said.destructive, said.open_world) == (None, None, None):
        notes.append("says nothing about its effects, so the cautious defaults apply")
    if tool.origin:
        notes.append(f"from the {tool.origin}")
    return notes


def _actions(page: str, conversation: Conversation, call: ToolCall, tools: ToolSettings | None) -> None:
    runnable = tools is not None and call.name in tools.offered  # switched off or set to Never: deny only
    with st.container(horizontal=True, gap="small"):
        st.button("Run", key=f"approval_run/{page}/{call.id}", type="primary", icon=":material/play_arrow:",
                  on_click=_decide, args=(page, conversation, call, Decision("run"), tools),
                  disabled=not runnable, help="Run the call with these arguments.")
        with st.popover("Edit", icon=":material/edit:", help="Change the arguments, then run the call.",
                        disabled=not runnable):
            code = _code_only(call)
            key = f"approval_edit/{page}/{call.id}"
            if code is not None:
                st.text_area("Code", value=code, key=key, height=200)
            else:
                st.text_area("Arguments (JSON)", value=json.dumps(call.arguments, indent=2, ensure_ascii=False),
                             key=key, height=200)
            st.button("Run with these arguments", key=f"approval_edited/{page}/{call.id}", type="primary",
                      icon=":material/play_arrow:", on_click=_run_edited, args=(page, conversation, call, key, tools))
        with st.popover("Deny", icon=":material/block:", help="Do not run it; the model is told you declined."):
            reason_key = f"approval_reason/{page}/{call.id}"
            st.text_input("Why (optional, the model reads it)", key=reason_key, max_chars=500)
            st.button("Deny the call", key=f"approval_deny/{page}/{call.id}", icon=":material/block:",
                      on_click=_deny, args=(page, conversation, call, reason_key, tools))


def _decided(page: str, call: ToolCall, decision: Decision) -> None:
    what = "Runs" if decision.action == "run" else "Declined"
    if decision.arguments is not None:
        what += " with your arguments"
    with st.container(horizontal=True, gap="small"):
        st.caption(f":material/check: {what}, once the other calls are decided.")
        st.button("Change", key=f"approval_change/{page}/{call.id}", type="tertiary", on_click=_undo,
                  args=(page, call.id))


def _code_only(call: ToolCall) -> str | None:
    """The program of a code tool's call ({"code": "..."}), edited as code rather than as JSON."""
    code = call.arguments.get("code")
    return code if list(call.arguments) == ["code"] and isinstance(code, str) else None


def _run_edited(page: str, conversation: Conversation, call: ToolCall, key: str, tools: ToolSettings | None) -> None:
    text = str(st.session_state.get(key, ""))
    edited: Any
    if _code_only(call) is not None:
        edited = {"code": text}
    else:
        try:
            edited = json.loads(text)
        except json.JSONDecodeError as exc:
            remember_problem(page, f"The arguments are not valid JSON: {exc.msg} (line {exc.lineno}, column "
                                   f"{exc.colno}). Nothing ran.", call.id)
            return
        if not isinstance(edited, dict):
            remember_problem(page, "The arguments must be a JSON object ({...}). Nothing ran.", call.id)
            return
    if tools is not None and (problem := tools.registry.validation_error(call.name, edited)):
        remember_problem(page, f"{problem} Nothing ran: change the arguments and try again.", call.id)
        return
    _decide(page, conversation, call, Decision("run", arguments=edited), tools)


def _deny(page: str, conversation: Conversation, call: ToolCall, reason_key: str, tools: ToolSettings | None) -> None:
    _decide(page, conversation, call, Decision("deny", reason=str(st.session_state.get(reason_key, ""))), tools)


def _decide(page: str, conversation: Conversation, call: ToolCall, decision: Decision,
            tools: ToolSettings | None) -> None:
    """Take one decision; once every call that asks has one, the page goes on with the turn on this run."""
    if questions.any_held(page) or state.turn_requested(page):
        return  # drawn before the turn went on (or a call asked): the cards say so now
    decisions = _decision_map(page)
    decisions[call.id] = decision
    problems = _problem_map(page)
    problems.pop(call.id, None)
    problems.pop(TURN_PROBLEM, None)
    waiting = pending_calls(conversation)
    asking = tools.needs_approval(waiting, conversation) if tools is not None else waiting
    if all(c.id in decisions for c in asking):
        state.request_resume(page, {c.id: decisions[c.id] for c in waiting if c.id in decisions})
        _forget(page)


def _undo(page: str, call_id: str) -> None:
    _decision_map(page).pop(call_id, None)


def _stop(page: str, conversation: Conversation) -> None:
    questions.cancel_all(page)  # a call waiting for an answer stops too
    stop_pending(conversation)  # saved at the start of the run this click makes (app/main.py)
    _forget(page)


def _forget(page: str) -> None:
    state.replace_per_page(_DECISIONS, page, {})
    state.replace_per_page(_PROBLEMS, page, {})


def _decisions(page: str, calls: Sequence[ToolCall]) -> dict[str, Decision]:
    """This session's decisions so far on these calls (those on calls that no longer wait are dropped)."""
    ids = {call.id for call in calls}
    kept = {call_id: d for call_id, d in _decision_map(page).items() if call_id in ids}
    return state.replace_per_page(_DECISIONS, page, kept)


def _problems(page: str) -> dict[str, str]:
    return dict(_problem_map(page))


def _decision_map(page: str) -> dict[str, Decision]:
    decisions: dict[str, Decision] = state.per_page(_DECISIONS, page, dict)
    return decisions


def _problem_map(page: str) -> dict[str, str]:
    problems: dict[str, str] = state.per_page(_PROBLEMS, page, dict)
    return problems
