"""The panes side by side. Each shows its conversation (the user's messages, its own answers and tool cards), then,
while its turn runs, the answer being written, with its own Stop; after it, its figures, and an approval box when
its calls wait. Under the panes, the tool-call strip: per target, whether each call parsed, matched its tool's
schema, and what the tool returned.

The turn's threads run on their own (app/compare/compare_run.py); `stream` draws their events as they come. A click (a
Stop, a vote) reruns the page, which draws the panes again from the session's state and goes on streaming."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.agent.loop import Decision, pending_calls
from app.compare.results import CallCheck, TargetResult
from app.domain.conversation import Conversation
from app.frontends.streamlit.compare_panes.compare_session import CompareSession, LivePane, Pane
from app.frontends.streamlit.messages import render_answer, render_message, text_markdown
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown

_REDRAW_EVERY_S = 0.1  # a pane's live part is redrawn at most 10 times a second
_RESULT_CHARS = 120


def pane_title(session: CompareSession, index: int, revealed: bool) -> str:
    """"A", or "A · label" once the vote (or no blind mode) shows who is who."""
    label = session.panes[index].target.label
    if not session.blind:
        return label
    letter = session.letter(index)
    return f"{letter} · {label}" if revealed else letter


def draw(session: CompareSession, revealed: bool, on_stop: Callable[[int], None],
         on_decide: Callable[[int, dict[str, Decision]], None],
         on_continue: Callable[[Pane], None]) -> Slots:
    """Draw the panes in their shown order; the slots of their live parts and Stop buttons. Buttons: a running pane's
    Stop (`on_stop(index)`), its waiting calls' Run and Deny (`on_decide(index, decisions)`), and a finished pane's
    Continue (`on_continue(pane)`)."""
    slots = Slots()
    columns = st.columns(len(session.panes), border=True)
    for column, index in zip(columns, session.order or range(len(session.panes)), strict=True):
        pane = session.panes[index]
        with column:
            head, stop = st.columns([4, 1], vertical_alignment="center")
            head.markdown(f"**{safe_label(pane_title(session, index, revealed))}**")
            if pane.live is not None:
                # Off once clicked (or over), but drawn while the turn runs: a button left out would stay on the
                # page, stale and clickable, until the run ends.
                stop.button("Stop", icon=":material/stop_circle:", key=f"compare_stop/{index}",
                            on_click=on_stop, args=(index,), disabled=pane.live.finished or _ending(session, index),
                            help="Stop this answer; the others go on.")
            if not session.blind or revealed:
                st.caption(safe_markdown(describe_target(pane)))
            _conversation(pane.conversation)
            slots.live[index] = st.empty()
            if pane.live is not None:
                draw_live(slots.live[index], pane.live)
            elif pane.result is not None:
                with slots.live[index].container():
                    _error(pane)
                    figures(pane.result)
                    waiting = pending_calls(pane.conversation)
                    if waiting:
                        _approval(index, pane, on_decide)
                    elif not session.running and (revealed or not session.blind):
                        st.button("Continue in Chat", icon=":material/forum:", key=f"compare_continue/{index}",
                                  on_click=on_continue, args=(pane,),
                                  help="Take this conversation into a normal chat (saved in the history), with "
                                       "this target's model and settings in the sidebar.")
    return slots


def _error(pane: Pane) -> None:
    """Why the pane's turn failed where its conversation does not say (its model did not load, a bad tool choice)."""
    error = pane.result.error if pane.result is not None else None
    last = pane.conversation.messages[-1] if pane.conversation.messages else None
    if error and not (last is not None and last.role == "assistant" and last.error):
        st.error(safe_markdown(error), icon=":material/error:")


def describe_target(pane: Pane) -> str:
    target = pane.target
    settings, params = target.settings, target.params
    if settings.backend == "openai":
        model = f"{settings.api_model or 'first model'} at {settings.api_base_url}"
    else:
        model = settings.model_path.rsplit("/", 1)[-1] if settings.model_path else "embedded SmolLM2"
    seed = f", seed {params.seed}" if params.seed is not None else ""
    return f"{settings.backend} · {model} · temperature {params.temperature:g}, top p {params.top_p:g}{seed}"


def _conversation(conversation: Conversation) -> None:
    """The pane's messages: the user's in their bubbles, the rest of each turn in one assistant bubble."""
    results = {m.tool_call_id: m for m in conversation.messages if m.role == "tool"}
    waiting = pending_calls(conversation)
    index, messages = 0, conversation.messages
    while index < len(messages):
        if messages[index].role in ("user", "system"):
            render_message(messages[index])
            index += 1
            continue
        with st.chat_message("assistant"):
            after_tool = False
            while index < len(messages) and messages[index].role in ("assistant", "tool"):
                if messages[index].role == "assistant":
                    render_answer(messages[index], results, after_tool=after_tool, waiting=waiting)
                    after_tool = bool(messages[index].tool_calls)
                index += 1


def draw_live(slot: DeltaGenerator, live: LivePane) -> None:
    """The running turn of a pane, drawn again in its slot."""
    with slot.container():
        results = {m.tool_call_id: m for m in live.messages if m.role == "tool"}
        with st.chat_message("assistant"):
            after_tool = False
            for message in live.messages:
                if message.role == "assistant":
                    render_answer(message, results, after_tool=after_tool)
                    after_tool = bool(message.tool_calls)
            for notice in live.notices:
                st.caption(safe_markdown(notice))
            if live.thinking and not live.text:
                st.caption(safe_markdown(f":material/psychology: Thinking... {len(live.thinking):,} characters"))
            if live.writing:
                st.caption(safe_label("Writing a call: " + live.writing[:300]))
            if live.running_tool:
                st.caption(safe_label(f"Running {live.running_tool}..."))
            if live.text:
                st.markdown(text_markdown(live.text, streaming=True))
            elif not (live.messages or live.writing or live.running_tool or live.errors or live.finished):
                st.markdown(":grey[waiting for the model...]")
            for error in live.errors:
                st.error(safe_markdown(error), icon=":material/error:")


@dataclass
class Slots:
    """Where `stream` draws: each pane's live part."""

    live: dict[int, DeltaGenerator] = field(default_factory=dict)


def _ending(session: CompareSession, index: int) -> bool:
    """Whether a running pane's turn is over or stopping (its Stop was clicked): its Stop is off. (A pane that ends
    while the others go on keeps it on, harmlessly, until the page is drawn again.)"""
    comparison = session.comparison
    if comparison is None:
        return True
    run = comparison.runs[index]
    return run.done or run.cancel.is_set()


def stream(session: CompareSession, slots: Slots) -> None:
    """Draw the running turn's events into the panes' slots until every target is done."""
    comparison = session.comparison
    assert comparison is not None
    drawn: dict[int, tuple[int, float]] = {}  # by pane: the version drawn, and when
    while True:
        done = comparison.done  # read before draining: whatever came before it is drained below
        session.take_events(comparison.next_events(timeout=_REDRAW_EVERY_S))
        now = time.monotonic()
        behind = False
        for index, pane in enumerate(session.panes):
            live = pane.live
            if live is None:
                continue
            version, at = drawn.get(index, (-1, 0.0))
            if live.version == version:
                continue
            if now - at >= _REDRAW_EVERY_S or done:
                drawn[index] = (live.version, now)
                draw_live(slots.live[index], live)
            else:
                behind = True
        if done and not behind:
            return


def figures(result: TargetResult) -> None:
    """Under a pane: the whole turn's figures. Each answer's own (TTFT, tok/s, tokens, prompt and cached tokens) is
    under it already; a turn of several generations (tool rounds) adds their sum."""
    m = result.metrics
    parts = [f"{m.total_time_s:.1f} s in all"]
    if m.generations > 1:
        parts.append(f"{m.generations} generations")
        if m.time_to_first_token_s is not None:
            parts.append(f"first token {m.time_to_first_token_s * 1000:.0f} ms")
        if m.tokens_per_second is not None:
            parts.append(f"{m.tokens_per_second:.1f} tok/s")
        parts.append(f"{m.completion_tokens} tokens")
        parts.append(f"prompts {m.prompt_tokens}" + (f" ({m.cached_tokens} cached)" if m.cached_tokens else ""))
    stopped = ":orange[Stopped] · " if result.stopped else ""
    st.caption(":material/timer: Turn: " + stopped + " · ".join(parts))


def _approval(index: int, pane: Pane, on_decide: Callable[[int, dict[str, Decision]], None]) -> None:
    """The pane's calls that wait for the user (a tool set to Ask): run them all or decline them all."""
    waiting = pending_calls(pane.conversation)
    names = ", ".join(dict.fromkeys(call.name for call in waiting))
    with st.container(border=True):
        st.markdown(safe_markdown(f":material/front_hand: **Run {names}?** The model wants to call it; this tool is "
                                  "set to Ask."))
        for call in waiting:
            st.code(f"{call.name}({_arguments(call.arguments)})", language=None, wrap_lines=True)
        run, deny = st.columns(2)
        run.button("Run", icon=":material/play_arrow:", key=f"compare_run/{index}", type="primary",
                   on_click=on_decide, args=(index, {call.id: Decision("run") for call in waiting}))
        deny.button("Deny", icon=":material/block:", key=f"compare_deny/{index}",
                    on_click=on_decide, args=(index, {call.id: Decision("deny") for call in waiting}))


def _arguments(arguments: dict[str, object]) -> str:
    return json.dumps(arguments, ensure_ascii=False)[:1000]


def tool_strip(session: CompareSession, revealed: bool) -> None:
    """Per target, each tool call of its last turn: parsed, matched the schema, how it ran and what it returned."""
    rows: list[dict[str, object]] = []
    for index in session.order or range(len(session.panes)):
        pane = session.panes[index]
        if pane.result is None:
            continue
        target = pane_title(session, index, revealed)
        if not pane.result.calls:
            rows.append({"target": target, "call": "(no tool call)", "parsed": None, "schema": None, "status": "",
                         "result": ""})
        for call in pane.result.calls:
            rows.append(_row(target, call))
    if not rows or all(row["call"] == "(no tool call)" for row in rows):
        return
    st.markdown("**Tool calls**")
    st.dataframe(rows, hide_index=True, width="stretch", column_config={
        "parsed": st.column_config.CheckboxColumn("Parsed", help="The call came back whole: valid JSON naming a "
                                                  "tool."),
        "schema": st.column_config.CheckboxColumn("Matches schema", help="Its arguments match the tool's schema."),
        "status": st.column_config.TextColumn("Ran", help="ok, failed, stopped, denied, or waiting for you."),
        "result": st.column_config.TextColumn("Result", width="large"),
    })


def _row(target: str, call: CallCheck) -> dict[str, object]:
    written = _arguments(call.arguments) if call.arguments is not None else call.arguments_text[:200]
    result = call.schema_error or call.result
    return {"target": target, "call": f"{call.name}({written})", "parsed": call.parsed,
            "schema": call.schema_valid, "status": call.status or "", "result": result[:_RESULT_CHARS]}
