"""Whether a tool's calls run as the model makes them: each tool's run policy, under the user's control.

    "auto"   the calls run as the model makes them (what every tool did before policies);
    "ask"    the turn pauses until the user lets each call run, maybe with edited arguments, or declines it
             (app/agent/loop.py: ApprovalNeeded, pending_calls, resume_turn);
    "never"  the tool is not offered to the model at all.

A tool's policy is the first of these that says one (`policy_for`):

    0. the administrator's "never" for this tool or its server in mcp.json: nothing overrides it;
    1. the user's choice for this tool in this conversation (by the tool's registry name);
    2. the administrator's for this tool in mcp.json: a server entry's "tools": {"the server's own tool name": ...};
    3. the administrator's for all the tools of its server in mcp.json: a server entry's "policy";
    4. what the tool says it does (`default_policy`).

Policies that come with a conversation from a file (an import: shared, downloaded, written by anyone) are
preferences, not permissions: `imported_policies` keeps only those that make a tool ask or never run, so that a file
can tighten what runs without asking but never loosen it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from app.tools.tool_registry import Tool

RunPolicy = Literal["auto", "ask", "never"]
RUN_POLICIES: tuple[RunPolicy, ...] = get_args(RunPolicy)  # from the least to the most restrictive

# How app/mcp_client/mcp_tools.py names what it adds: the origin of a server's tools, and the registry names it gives
# them (characters a tool name may not have become _, at most 64; `server_tool` where the plain name clashes, and
# `_2`, `_3`... where even that does). tests/unit/test_tool_policy.py checks these against mcp_registry itself.
MCP_ORIGIN_PREFIX = "MCP server "
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
_NUMBERED = re.compile(r"_\d+$")
_MAX_NAME = 64


def default_policy(tool: Tool) -> RunPolicy:
    """What a tool's own hints make of it, with MCP's defaults for what they leave unsaid (ToolHints.effective).

    The app's own tools (no origin; annotated in this code base) run when they only read, or when whatever they
    change stays in a sandbox: not destructive and closed-world (python in its isolated kernel). Anything else asks
    (generate_image adds pictures out on a service). An MCP server's tools are annotated by that server: they run
    when they only read and stay in a closed world; reaching the open world (the web, an API), changing anything,
    or saying nothing at all asks."""
    hints = tool.hints.effective
    if not tool.origin:
        return "auto" if hints.read_only or not (hints.destructive or hints.open_world) else "ask"
    return "auto" if hints.read_only and not hints.open_world else "ask"


@dataclass(frozen=True)
class ServerPolicies:
    """What the administrator set for one MCP server's tools in mcp.json."""

    default: RunPolicy | None = None  # the entry's "policy": for all its tools
    tools: Mapping[str, RunPolicy] = field(default_factory=dict)  # its "tools", by the server's own tool names


@dataclass(frozen=True)
class PolicyDefaults:
    """The administrator's run policies, by MCP server name (app/mcp_client/server_config.py: policy_defaults)."""

    servers: Mapping[str, ServerPolicies] = field(default_factory=dict)

    def for_tool(self, tool: Tool) -> RunPolicy | None:
        """The administrator's policy for this registry tool, None when mcp.json sets none. Where the registry's
        renaming leaves it open which of the server's tools a name stands for (two tool names that differ only in
        characters a name may not have), the most restrictive of their policies applies."""
        if not tool.origin.startswith(MCP_ORIGIN_PREFIX):
            return None
        server = tool.origin.removeprefix(MCP_ORIGIN_PREFIX)
        policies = self.servers.get(server)
        if policies is None:
            return None
        found = [policy for name, policy in policies.tools.items() if tool.name in _registry_names(server, name)]
        if not found and _NUMBERED.search(tool.name):
            # Numbered: a namespaced name that was taken already (server_tool_2); never the plain name numbered
            # (server b's own "free_2" is not its "free").
            base = _NUMBERED.sub("", tool.name)
            found = [policy for name, policy in policies.tools.items() if base == _registry_names(server, name)[1]]
        return max(found, key=RUN_POLICIES.index) if found else policies.default


def policy_for(tool: Tool, overrides: Mapping[str, RunPolicy],
               admin_defaults: PolicyDefaults | None = None) -> RunPolicy:
    """The tool's run policy: the user's override (`overrides`, by registry tool name, per conversation), else the
    administrator's for the tool, else for its server, else `default_policy` (the order above). ValueError for an
    override that is no policy, rather than guessing what was meant. The administrator's "never" wins over any
    override: a tool they switched off stays off whatever a conversation says."""
    admin = (admin_defaults or PolicyDefaults()).for_tool(tool)
    override = overrides.get(tool.name)
    if override is not None and override not in RUN_POLICIES:
        raise ValueError(f"{override!r} is not a run policy for {tool.name}; expected one of "
                         f"{', '.join(RUN_POLICIES)}")
    if admin == "never":
        return admin
    if override is not None:
        return override
    return admin if admin is not None else default_policy(tool)


# What a file may ask of a tool: to ask first, or never to run. "auto" (run without asking) is a permission only the
# user grants, in the app, for their own conversation.
IMPORTABLE_POLICIES: tuple[RunPolicy, ...] = ("ask", "never")


def imported_policies(policies: Mapping[str, RunPolicy]) -> tuple[dict[str, RunPolicy], list[str]]:
    """The run policies of an imported conversation that may be restored (only those that tighten: "ask" and
    "never"; a tool's own default is never "never", and an administrator's "never" wins anyway), and the names of
    the tools whose looser policy was left out."""
    kept = {name: policy for name, policy in policies.items() if policy in IMPORTABLE_POLICIES}
    return kept, [name for name in policies if name not in kept]


def _registry_names(server: str, tool: str) -> tuple[str, str]:
    """What mcp_registry calls the server's tool: its plain name, or its namespaced one where that clashes."""
    plain = _fit(tool)
    return plain, _fit(f"{server}_{plain}")


def _fit(name: str) -> str:
    return _NOT_ALLOWED.sub("_", name)[:_MAX_NAME] or "tool"
