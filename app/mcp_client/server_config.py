"""mcp.json: the MCP servers the administrator configured, in the common shape

    {"mcpServers": {"name": {"command": "...", "args": [...], "env": {...}},      (stdio: a command line)
                    "name": {"url": "https://...", "headers": {...}}}}             (Streamable HTTP)

checked strictly: a typo or a value of the wrong type is an McpConfigError that names the server and the field.
`${NAME}` in env and header values is replaced by the environment variable NAME, so secrets can stay out of the file.

Either kind of entry may also say whether its tools' calls run as the model makes them (app/tools/policy.py):

    "policy": "auto" | "ask" | "never",                    (the default for all of this server's tools)
    "tools": {"a_tool": "auto" | "ask" | "never", ...}     (per tool, by the server's own tool name)

The user's own choice for a tool overrides both; `policy_defaults` hands them to app/tools/policy.py.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.tools.policy import PolicyDefaults, RunPolicy, ServerPolicies

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")  # names prefix tool names, which allow only these
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpConfigError(ValueError):
    """mcp.json (or a server the user entered) cannot be used; the message says which server and field, and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Server(_Strict):
    """What every kind of server entry may say: the run policies of its tools, as the administrator sets them."""

    policy: RunPolicy | None = None
    tools: dict[str, RunPolicy] = {}

    @field_validator("tools")
    @classmethod
    def _named_tools(cls, tools: dict[str, RunPolicy]) -> dict[str, RunPolicy]:
        if "" in tools:
            raise ValueError("a tool's name must not be empty")
        return tools


class StdioServer(_Server):
    """A server the app starts as a subprocess and talks to over its stdin and stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = []
    env: dict[str, str] = {}  # added to a minimal environment (PATH, HOME...): the app's own secrets stay out
    cwd: str | None = None


class HttpServer(_Server):
    """A server reached over Streamable HTTP."""

    type: Literal["http", "streamable-http", "streamableHttp"] = "http"
    url: str
    headers: dict[str, str] = {}

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return url


ServerSpec = StdioServer | HttpServer


def load_config(path: str) -> dict[str, ServerSpec]:
    """The servers in the mcp.json at `path` ("" means none)."""
    if not path:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"{path}: cannot read the MCP configuration ({exc.strerror or exc}).") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).") from None
    return parse_config(data, where=path)


def parse_config(data: Any, where: str = "mcp.json") -> dict[str, ServerSpec]:
    if not isinstance(data, dict) or set(data) - {"mcpServers"}:
        found = f"the key(s) {', '.join(sorted(set(data) - {'mcpServers'}))}" if isinstance(data, dict) else "no object"
        raise McpConfigError(f'{where}: expected {{"mcpServers": {{...}}}}, found {found}.')
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{where}: mcpServers must be an object of named servers.")
    return {name: parse_server(name, entry, where) for name, entry in servers.items()}


def parse_server(name: str, entry: Any, where: str = "mcp.json") -> ServerSpec:
    """One server entry, validated; its `${NAME}` references replaced from the environment."""
    prefix = f"{where}: server {name!r}"
    if not SERVER_NAME.fullmatch(name):
        raise McpConfigError(f"{prefix}: a server name may use letters, digits, _ and - (at most 40).")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{prefix}: must be an object with command (stdio) or url (Streamable HTTP).")
    if ("command" in entry) == ("url" in entry):
        raise McpConfigError(f"{prefix}: needs either command (a stdio server) or url (a Streamable HTTP server).")
    model = StdioServer if "command" in entry else HttpServer
    try:
        spec = model.model_validate(entry)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'entry'}: "
                             f"{error['msg'].removeprefix('Value error, ')}" for error in exc.errors())
        raise McpConfigError(f"{prefix}: {problems}.") from None
    if isinstance(spec, StdioServer):
        return spec.model_copy(update={"env": _expand(spec.env, f"{prefix}: env")})
    return spec.model_copy(update={"headers": _expand(spec.headers, f"{prefix}: headers")})


def policy_defaults(servers: Mapping[str, ServerSpec]) -> PolicyDefaults:
    """The run policies the administrator set for the servers' tools (those of `load_config`), for
    app/tools/policy.py's policy_for. Servers that set none are left out."""
    return PolicyDefaults({name: ServerPolicies(spec.policy, dict(spec.tools)) for name, spec in servers.items()
                           if spec.policy is not None or spec.tools})


def bearer_server(url: str, token: str = "") -> HttpServer:
    """A Streamable HTTP server as a user enters it: a URL and an optional bearer token."""
    try:
        headers = {"Authorization": f"Bearer {token.strip()}"} if token.strip() else {}
        return HttpServer(url=url.strip(), headers=headers)
    except ValidationError:
        raise McpConfigError(f"{url.strip() or 'The URL'!r} is not an http:// or https:// URL with a host.") from None


def _expand(values: dict[str, str], where: str) -> dict[str, str]:
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise McpConfigError(f"{where}: the environment variable {name} is not set.")
        return os.environ[name]

    return {key: _VARIABLE.sub(variable, value) for key, value in values.items()}
