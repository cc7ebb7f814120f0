"""Each tool's run policy in the sidebar, next to its switch: runs, asks first, or never (app/tools/policy.py).

The user's choices are kept per page under `settings.{page}.tool_policies` (a tool's registry name -> policy, only
where it differs from the tool's default), which app/frontends/streamlit/persistence.py stores with the conversation and
restores when it is opened again. The selectors only show that mapping: each run sets them from it before they are
drawn, so opening another conversation shows its policies at once.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from app.frontends.streamlit.safe_markdown import safe_label
from app.tools.policy import RUN_POLICIES, PolicyDefaults, RunPolicy, default_policy, policy_for
from app.tools.tool_registry import Tool

OVERRIDES_KEY = "settings.{page}.tool_policies"  # what persistence.SETTINGS_KEYS stores as "tool_policies"
LABELS: dict[RunPolicy, str] = {"auto": "Run", "ask": "Ask", "never": "Never"}
_MEANING: dict[RunPolicy, str] = {
    "auto": "its calls run as the model makes them",
    "ask": "each call waits for you to run, edit or deny it",
    "never": "it is not offered to the model",
}


def overrides(page: str) -> dict[str, RunPolicy]:
    """The user's policies on this page, by tool name (a copy: change them through the selectors)."""
    stored = st.session_state.get(OVERRIDES_KEY.format(page=page))
    if not isinstance(stored, Mapping):
        return {}
    return {name: policy for name, policy in stored.items() if isinstance(name, str) and policy in RUN_POLICIES}


def select(page: str, tool: Tool, chosen: Mapping[str, RunPolicy], admin: PolicyDefaults) -> RunPolicy:
    """The tool's policy selector; returns the policy in force (the user's, else the administrator's or the tool's
    own default)."""
    base = policy_for(tool, {}, admin)
    current = policy_for(tool, chosen, admin)
    key = f"_run_policy/{page}/{tool.name}"
    st.session_state[key] = current  # the stored choice, also right after another conversation was opened
    st.selectbox(
        safe_label(f"Run policy of {tool.name}"), RUN_POLICIES, key=key, label_visibility="collapsed",
        format_func=lambda policy: LABELS[policy], on_change=_changed, args=(page, tool.name, key, base),
        help=_help(tool, base, admin), disabled=admin.for_tool(tool) == "never",  # nothing overrides it
    )
    return current


def _changed(page: str, name: str, key: str, base: RunPolicy) -> None:
    chosen = overrides(page)
    policy = st.session_state[key]
    if policy == base:
        chosen.pop(name, None)  # back to the default: nothing to remember
    else:
        chosen[name] = policy
    st.session_state[OVERRIDES_KEY.format(page=page)] = chosen


def _help(tool: Tool, base: RunPolicy, admin: PolicyDefaults) -> str:
    """What the three choices mean and where this tool's default comes from."""
    if admin.for_tool(tool) == "never":
        return "The administrator set this tool to **Never** in mcp.json: it is not offered to the model."
    if admin.for_tool(tool) is not None:
        source = "set by the administrator in mcp.json"
    elif tool.origin:
        said = (tool.hints.read_only, tool.hints.destructive, tool.hints.open_world) != (None, None, None)
        source = "from the server's annotations of the tool" if said else "the server says nothing about the tool"
    else:
        source = _own_reason(tool)
    lines = [f"**{LABELS[policy]}**: {_MEANING[policy]}." for policy in RUN_POLICIES]
    return "\n\n".join([*lines, f"Default here: {LABELS[base]} ({source}). Kept with this conversation."])


def _own_reason(tool: Tool) -> str:
    hints = tool.hints.effective
    if default_policy(tool) == "auto":
        return "it only reads" if hints.read_only else "what it changes stays in its sandbox"
    return "it reaches the outside world" if hints.open_world else "it can change things"
