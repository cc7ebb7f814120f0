"""Save as test case, under an answer: the conversation up to its question, the page's tools and settings, and the
checks chosen in a small form, added to one of the user's eval sets (app/evals/library.py). The form starts from
what the answer did (its first tool call and arguments), so that "this was right" is one click."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import streamlit as st
from pydantic import ValidationError

from app.domain.conversation import Conversation
from app.domain.validation import describe
from app.evals.cases import EvalCase, Sampling
from app.evals.library import EvalLibraryError, add_case, case_from_turn
from app.frontends.streamlit import persistence, sidebar
from app.frontends.streamlit.safe_markdown import safe_markdown
from app.storage.errors import StorageError
from app.storage.eval_sets import EvalSetStore

DEFAULT_SET = "My evals"
_LAST_SET = "eval_case_form/last_set"


def save_as_test_case(page: str, conversation: Conversation, head: int, last: int) -> None:
    """The Test case popover for the answer that messages `head`..`last` make up."""
    if persistence.owner() is None or head == 0 or conversation.messages[head - 1].role != "user":
        return
    calls = [call for message in conversation.messages[head : last + 1] for call in message.tool_calls]
    with st.popover("Test case", icon=":material/fact_check:", type="tertiary",
                    help="Keep this turn as a test case in an eval set, with the checks its answer must pass"):
        # Keyed by the answer too: after Regenerate the form starts again from the new answer.
        answer = "".join(m.content for m in conversation.messages[head : last + 1]) + "".join(c.id for c in calls)
        form = f"eval_case/{page}/{head}/{hashlib.sha256(answer.encode()).hexdigest()[:12]}"
        with st.form(key=form, border=False, enter_to_submit=False):
            set_name = st.text_input("Eval set", value=st.session_state.get(_LAST_SET, DEFAULT_SET), max_chars=200,
                                     key=f"{form}/set")
            name = st.text_input("Case name", value=conversation.messages[head - 1].content.strip()[:60] or "case",
                                 max_chars=200, key=f"{form}/name")
            st.caption("Checks its answer must pass (at least one):")
            tool = st.text_input("Calls the tool", value=calls[0].name if calls else "",
                                 help="Empty: no tool call is expected", key=f"{form}/tool")
            arguments = st.text_area("…with these arguments (JSON object: each key given must match)",
                                     value=json.dumps(calls[0].arguments, ensure_ascii=False) if calls else "",
                                     height=68, key=f"{form}/arguments")
            contains = st.text_input("Answer contains", key=f"{form}/contains")
            pattern = st.text_input("Answer matches (a regular expression)", key=f"{form}/pattern")
            schema = st.text_area("Answer is JSON matching this JSON Schema", height=68, key=f"{form}/schema")
            seconds = st.number_input("At most this many seconds (0: any)", min_value=0.0, value=0.0, step=1.0,
                                      key=f"{form}/seconds")
            tokens = st.number_input("At most this many tokens (0: any)", min_value=0, value=0, step=16,
                                     key=f"{form}/tokens")
            rubric = st.text_area("Model-judged: a rubric the answer must meet", height=68,
                                  help="Judged by a model (the target named below) when the set runs: marked as "
                                       "model-judged in every report", key=f"{form}/rubric")
            judge = st.text_input("Judged by (a target's label)", key=f"{form}/judge")
            saved = st.form_submit_button("Save the test case", type="primary", icon=":material/save:")
        if saved:
            _save(page, conversation, head, calls, set_name.strip(), name.strip(), {
                "tool": tool.strip(), "arguments": arguments.strip(), "contains": contains, "pattern": pattern,
                "schema": schema.strip(), "seconds": seconds, "tokens": tokens, "rubric": rubric.strip(),
                "judge": judge.strip()})


def _checks(form: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks the form asks for; ValueError naming a field that is not what it should be."""
    checks: list[dict[str, Any]] = []
    if form["tool"]:
        check: dict[str, Any] = {"type": "tool_call", "name": form["tool"]}
        if form["arguments"]:
            try:
                check["arguments"] = json.loads(form["arguments"])
            except ValueError as exc:
                raise ValueError(f"The arguments are not JSON: {exc}.") from None
        checks.append(check)
    if form["contains"]:
        checks.append({"type": "contains", "text": form["contains"]})
    if form["pattern"]:
        checks.append({"type": "matches", "pattern": form["pattern"]})
    if form["schema"]:
        try:
            checks.append({"type": "json_schema", "schema": json.loads(form["schema"])})
        except ValueError as exc:
            raise ValueError(f"The JSON Schema is not JSON: {exc}.") from None
    if form["seconds"]:
        checks.append({"type": "max_latency", "seconds": float(form["seconds"])})
    if form["tokens"]:
        checks.append({"type": "max_tokens", "tokens": int(form["tokens"])})
    if form["rubric"] or form["judge"]:
        checks.append({"type": "judge", "rubric": form["rubric"], "judge": form["judge"]})
    if not checks:
        raise ValueError("Choose at least one check: what must its answer do?")
    return checks


def _save(page: str, conversation: Conversation, head: int, calls: list[Any], set_name: str, name: str,
          form: dict[str, Any]) -> None:
    settings = sidebar.current()
    params = settings.params
    try:
        checks = [EvalCase.model_validate({"name": "x", "messages": [{"role": "user", "content": "x"}],
                                           "checks": [check]}).checks[0] for check in _checks(form)]
        tools = sorted({call.name for call in calls} | ({form["tool"]} if form["tool"] else set()))
        case = case_from_turn(conversation, head, name or "case", checks, page=page, tools=tools,
                              system_prompt=settings.system_prompt or None,
                              sampling=Sampling(temperature=float(params.temperature), top_p=float(params.top_p),
                                                top_k=params.top_k, max_new_tokens=params.max_new_tokens,
                                                repetition_penalty=float(params.repetition_penalty)))
        owner = persistence.owner()
        assert owner is not None
        stored = add_case(persistence.store_of(EvalSetStore), owner, set_name or DEFAULT_SET, case)
    except ValidationError as exc:
        st.error(safe_markdown(describe(exc, "a check")), icon=":material/error:")
        return
    except (ValueError, EvalLibraryError, StorageError) as exc:
        st.error(safe_markdown(str(exc)), icon=":material/error:")
        return
    st.session_state[_LAST_SET] = set_name or DEFAULT_SET
    st.success(safe_markdown(f"Saved **{stored}** in the eval set **{set_name or DEFAULT_SET}**: run it on the "
                             "Evals page."), icon=":material/fact_check:")
