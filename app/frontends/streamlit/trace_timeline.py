"""Under an answer: its turn's trace as a timeline (the turn, each model call, each tool call and its MCP requests,
placed in time), read from the spans the app keeps in memory (app/telemetry/timeline.py): no collector needed.
After a restart, or for an imported answer, the trace is no longer there and the button says so."""

from __future__ import annotations

import streamlit as st

from app.domain.conversation import Conversation
from app.frontends.streamlit.safe_markdown import safe_markdown
from app.telemetry.timeline import TIMELINES, Step

# The attributes shown beside each step, by their column's heading (a step without one leaves its cell empty).
_COLUMNS = {"gen_ai.usage.input_tokens": "tokens in", "gen_ai.usage.cache_read.input_tokens": "from cache",
            "gen_ai.usage.output_tokens": "tokens out", "gen_ai.response.time_to_first_chunk": "first token (s)",
            "gen_ai.response.finish_reasons": "finish", "app.tool.policy": "policy", "app.tool.decision": "decision",
            "app.tool.approval_wait_s": "approval wait (s)", "app.tool.status": "tool status",
            "app.tool.result_chars": "result chars", "app.mcp.server": "MCP server"}


def trace_button(conversation: Conversation, head: int, last: int, key: str) -> None:
    trace_ids = [m.trace_id for m in conversation.messages[head : last + 1] if m.role == "assistant" and m.trace_id]
    if not trace_ids:
        return
    with st.popover("Trace", icon=":material/timeline:", type="tertiary",
                    help="Where the time went: the turn, its model calls and its tool calls"):
        steps = [step for trace_id in dict.fromkeys(trace_ids) for step in TIMELINES.steps(trace_id)]
        if not steps:
            st.caption("This answer's trace is no longer in memory (the app restarted, or the answer was "
                       "imported). Send traces to a collector to keep them: see the docs on tracing.")
            return
        show(steps, key)


def show(steps: list[Step], key: str) -> None:
    shown = [name for name in _COLUMNS if any(name in step.attributes for step in steps)]
    # Numbered: two model calls of one turn have the same name, and each needs its own band.
    rows = [{"step": f"{number}. {'· ' * step.depth}{step.name}", "start (s)": round(step.start_s, 3),
             "end (s)": round(step.start_s + step.duration_s, 3), "status": step.status,
             **{_COLUMNS[name]: _cell(step.attributes.get(name)) for name in shown}}
            for number, step in enumerate(steps, 1)]
    st.vega_lite_chart(rows, {
        "mark": {"type": "bar", "cornerRadius": 2},
        "height": {"step": 26},  # a band per step, however many
        "encoding": {"y": {"field": "step", "type": "nominal", "sort": None, "title": None,
                           "axis": {"labelLimit": 320}},
                     "x": {"field": "start (s)", "type": "quantitative", "title": "seconds"},
                     "x2": {"field": "end (s)"},
                     "color": {"field": "status", "type": "nominal", "legend": None,
                               "scale": {"domain": ["ok", "error"], "range": ["#4c78a8", "#e45756"]}}}},
        key=key, width="stretch")
    st.dataframe(rows, hide_index=True, width="stretch")
    st.caption(safe_markdown(f"{len(steps)} spans, {max(s.start_s + s.duration_s for s in steps):.2f} s in all "
                             "(OpenTelemetry GenAI spans; the same go to a collector when OTEL_EXPORTER_OTLP_ENDPOINT "
                             "is set)."))


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value)
    return str(value)
