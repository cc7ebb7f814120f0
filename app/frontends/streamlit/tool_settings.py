"""The Tools section of the sidebar: which tools the model may use (the page's own and those of MCP servers),
each with its run policy next to its switch (app/frontends/streamlit/run_policies.py), tool choice, dialect and round
limit."""

from __future__ import annotations

import streamlit as st

from app.agent.loop import DEFAULT_MAX_ROUNDS, ToolSettings
from app.clients.client_protocol import Client
from app.frontends.streamlit import knowledge_chat, mcp_settings, presets, run_policies, sidebar
from app.frontends.streamlit.safe_markdown import safe_label
from app.prompting.dialects import DIALECTS
from app.tools import load_tools
from app.tools.tool_registry import Tool, ToolRegistry

KEPT_PREFIX = "settings."  # app/main.py keeps widget values under this prefix while another page is shown
_AUTO = "auto"


def render(client: Client | None, page: str, registry: ToolRegistry | None = None) -> ToolSettings:
    """The page's tool settings (each page keeps its own) over `registry` (default: the built-in tools) and the
    tools of the MCP servers this session sees."""
    registry = (registry if registry is not None else load_tools()).merged(knowledge_chat.tools())
    KEY_PREFIX = f"{KEPT_PREFIX}{page}."  # reads like the constant it is within one page
    with sidebar.page_section():
        st.subheader("Tools")
        registry = registry.merged(mcp_settings.tools(taken=registry.names))
        for tool in registry:  # defaults through session state only: app/main.py re-assigns these keys
            st.session_state.setdefault(f"{KEY_PREFIX}enabled.{tool.name}", True)
        if (chosen := presets.pending_tools(page)) is not None:  # a preset applied: its tools on, the others off
            for tool in registry:
                st.session_state[f"{KEY_PREFIX}enabled.{tool.name}"] = tool.name in chosen
        st.session_state.setdefault(f"{KEY_PREFIX}max_rounds", DEFAULT_MAX_ROUNDS)
        overrides = run_policies.overrides(page)
        admin = mcp_settings.policy_defaults()
        enabled, policies = [], {}
        for tool in registry:
            switch, policy = st.columns([3, 2], vertical_alignment="center", gap="small")
            if switch.toggle(safe_label(tool.name), key=f"{KEY_PREFIX}enabled.{tool.name}", help=_help(tool)):
                enabled.append(tool.name)
            with policy:
                policies[tool.name] = run_policies.select(page, tool, overrides, admin)
        mcp_settings.render()
        choices = ["auto", "none", "required", *(name for name in enabled if policies[name] != "never")]
        if st.session_state.get(f"{KEY_PREFIX}choice", "auto") not in choices:
            st.session_state[f"{KEY_PREFIX}choice"] = "auto"  # the chosen tool was just switched off
        choice = st.selectbox(
            "Tool choice",
            choices,
            key=f"{KEY_PREFIX}choice",
            help="auto: the model decides. none: no tools. required: it must call one. A tool's name: it must call "
            "that one. required and named calls are forced with constrained decoding, so even a small model "
            "produces a valid call; the answer after the call is free.",
        )
        detected = client.capabilities.dialect if client is not None else None
        options: list[str] = [_AUTO, *DIALECTS]
        dialect = st.selectbox(
            "Tool-call dialect",
            options,
            format_func=lambda name: _dialect_label(name, detected),
            key=f"{KEY_PREFIX}dialect",
            help="How tools and calls are written for this model. Auto reads it from the model's chat template.",
        )
        max_rounds = st.number_input(
            "Max model calls per turn", min_value=1, max_value=10, step=1,
            key=f"{KEY_PREFIX}max_rounds",
            help="Each tool result costs another generation; the last one must answer in words.",
        )
        # A model whose template knows no tools does not call them on its own: after a result it should answer.
        native = client.capabilities.native_tools if client is not None else True
        if not native:
            st.caption("This model's chat template knows no tools: after a tool result it answers without tools.")
        st.divider()
    return ToolSettings(
        registry=registry.subset(enabled),
        choice=choice if choice in choices else "auto",
        dialect=None if dialect == _AUTO else dialect,
        max_rounds=int(max_rounds),
        follow_up="auto" if native else "none",
        policies={name: policies[name] for name in enabled},
    )


def _help(tool: Tool) -> str:
    if not tool.origin:
        return tool.description
    return f"{mcp_settings.plain(tool.description)}\n\nFrom the {tool.origin}."  # a server's words, shown as text


def _dialect_label(name: str, detected: str | None) -> str:
    """"auto (Hermes)" when the model's template told us which dialect it speaks, else the dialect's own label."""
    if name != _AUTO:
        return DIALECTS[name].label
    return f"auto ({DIALECTS[detected].label})" if detected is not None and detected in DIALECTS else "auto"
