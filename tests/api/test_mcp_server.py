"""The app's tools as an MCP server (app/frontends/mcp/server.py), driven by the MCP SDK's own client: over stdio (the
SDK starts `python -m app.frontends.mcp`), over Streamable HTTP on 127.0.0.1 (a real server process with an API key:
given, generated, or from a file; browsers' origins refused unless listed) and in memory (the built-in tools'
annotations and structured results). The python tool runs in the real bubblewrap sandbox; the browser reads a local
test site."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import anyio
import httpx
import httpx2
import mcp.types as types
import pytest
from jsonschema import Draft202012Validator
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp.types.jsonrpc import JSONRPCNotification, JSONRPCRequest

from app.frontends.mcp.server import build_server
from app.tools import load_tools
from harness.local_http import free_port, json_reply, serve
from harness.processes import server_process
from tests.helpers import ARTICLE, ROOT, html
from tests.unit.test_tools import open_meteo  # noqa: F401 (a fixture: the weather tool's stand-in for Open-Meteo)

pytestmark = pytest.mark.timeout(600)  # a safety net: kernels start in a sandbox, on a machine that may be busy
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
KEY = "test-key-5f1c"
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@asynccontextmanager
async def stdio_server(env: dict[str, str], log: Path) -> AsyncIterator[Client]:
    """The SDK's client on our server, which it starts over stdio (`env` over the SDK's safe defaults, stderr into
    `log`); leaving closes the server's stdin and waits for it to exit."""
    parameters = StdioServerParameters(command=sys.executable, args=["-m", "app.frontends.mcp"], cwd=ROOT, env=env)
    with log.open("w") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog)) as client:
            yield client


def processes_naming(folder: Path) -> list[str]:
    """The command lines that name `folder`: the kernels (their connection files) and sandboxes started for it."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process has just ended
            continue
        if str(folder) in line:
            found.append(line)
    return found


def assert_everything_stopped(sessions: Path) -> None:
    """No kernel or sandbox left (waiting, as a safety net, for the kernel to reap what it killed), no folder."""
    deadline = time.monotonic() + 30
    while (left := processes_naming(sessions)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
    assert list(sessions.iterdir()) == []


@pytest.fixture
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's DEMO_SESSIONS_DIR: short, because the kernel's Unix sockets are named by paths inside it."""
    return tmp_path_factory.mktemp("mcp")


# ----- stdio -------------------------------------------------------------------------------------------------------

def test_stdio_lists_every_tool_with_the_registrys_schema_and_calls_them(sessions, tmp_path):
    builtin = load_tools()

    async def scenario() -> None:
        async with stdio_server({"DEMO_SESSIONS_DIR": str(sessions)}, tmp_path / "server.log") as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"python", "web_search", "open_url", "mclick", *builtin.names} <= set(listed)
            calculator = builtin.get("calculator")
            assert listed["calculator"].input_schema == calculator.parameters
            assert listed["calculator"].description == calculator.description
            assert listed["python"].input_schema["required"] == ["code"]
            assert listed["mclick"].input_schema["properties"]["ids"]["type"] == "array"

            # The hints as annotations: what each tool does to the world, and its title.
            assert listed["calculator"].title == "Calculator" and listed["calculator"].annotations == reader(
                "Calculator", open_world=False)
            assert listed["python"].annotations == types.ToolAnnotations(
                title="Python (sandboxed)", read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                open_world_hint=False)  # it changes its kernel, nothing outside its sandbox, with no network
            assert listed["web_search"].annotations == reader("Web search", open_world=True)
            assert listed["open_url"].annotations == reader("Open a web page", open_world=True)
            assert listed["mclick"].annotations == reader("Open search results", open_world=True)
            assert listed["calculator"].output_schema == calculator.output_schema
            assert listed["python"].output_schema is None  # its text and plots have no structure to declare

            result = await client.call_tool("calculator", {"expression": "2 + 3 * 4"})
            assert not result.is_error and text_of(result) == "2 + 3 * 4 = 14"
            assert result.structured_content == {"expression": "2 + 3 * 4", "value": 14}
            Draft202012Validator(listed["calculator"].output_schema).validate(result.structured_content)

            invalid = await client.call_tool("calculator", {"expr": "2 + 2"})
            assert invalid.is_error and "invalid arguments for calculator" in text_of(invalid)
            assert "expression" in text_of(invalid)  # the reason: the required argument is missing

            failed = await client.call_tool("calculator", {"expression": "1 / 0"})
            assert failed.is_error and text_of(failed) == "Error: division by zero."
            assert failed.structured_content is None  # a failure carries no result to check against the schema

            with pytest.raises(MCPError, match="Unknown tool: no_such_tool"):
                await client.call_tool("no_such_tool", {})

    asyncio.run(scenario())


def reader(title: str, *, open_world: bool) -> types.ToolAnnotations:
    """The annotations of a tool that only reads or computes, said in full."""
    return types.ToolAnnotations(title=title, read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                 open_world_hint=open_world)


# ----- in memory: annotations and structured results of the built-in tools ----------------------------------------

@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 without a handshake, and 2025-11-25 with one
def test_structured_results_match_their_output_schemas_and_keep_their_text(open_meteo, mode):  # noqa: F811
    builtin = load_tools()
    calls = {
        "calculator": ({"expression": "6 * 7"}, "6 * 7 = 42"),
        "convert_units": ({"value": 100, "from_unit": "C", "to_unit": "F"}, "100 C = 212 F"),
        "random_number": ({"low": 3, "high": 3}, "3"),
        "current_time": ({"timezone": "UTC"}, None),  # the text changes by the second
        "get_weather": ({"city": "Paris"}, "Paris, France at 2026-11-22T23:00 (local time): overcast, 8.1°C (feels "
                                           "like 5.9°C), humidity 81%, wind 12.3km/h."),
    }

    async def scenario() -> None:
        async with Client(build_server(builtin), mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {name for name, tool in listed.items() if tool.output_schema is not None} == set(calls)
            assert listed["get_weather"].annotations == reader("Weather (Open-Meteo)", open_world=True)
            assert listed["count_words"].annotations is None  # the user's own tool says nothing
            for name, (arguments, text) in calls.items():
                result = await client.call_tool(name, arguments)
                assert not result.is_error, text_of(result)
                Draft202012Validator(listed[name].output_schema).validate(result.structured_content)
                if text is None:  # the time: the text says it in words, the structured result in ISO 8601
                    now = datetime.fromisoformat(result.structured_content["time"])
                    text = now.strftime("%A %d %B %Y, %H:%M:%S (UTC, UTC+0000)")
                assert text_of(result) == text
                assert [block.type for block in result.content] == ["text"]  # no JSON copy for these clients
            weather = await client.call_tool("get_weather", {"city": "Paris"})
            assert weather.structured_content["temperature"] == {"value": 8.1, "unit": "°C"}

    asyncio.run(scenario())


async def old_client(version: str, name: str, arguments: dict) -> tuple[str, dict]:
    """A client of an older protocol, speaking JSON-RPC to the app's server in memory (the SDK's own client only
    offers the newest versions): the version the server agreed to, and its answer to one tool call."""
    server = build_server(load_tools())
    async with create_client_server_memory_streams() as ((read, write), (server_read, server_write)):
        async with anyio.create_task_group() as group:
            group.start_soon(server.run, server_read, server_write, server.create_initialization_options())

            async def ask(number: int, method: str, params: dict) -> dict:
                request = JSONRPCRequest(jsonrpc="2.0", id=number, method=method, params=params)
                await write.send(SessionMessage(request))
                answer = await read.receive()
                assert isinstance(answer, SessionMessage) and answer.message.id == number
                return answer.message.result

            agreed = await ask(1, "initialize", {"protocolVersion": version, "capabilities": {},
                                                 "clientInfo": {"name": "old", "version": "1"}})
            await write.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")))
            result = await ask(2, "tools/call", {"name": name, "arguments": arguments})
            group.cancel_scope.cancel()
    return agreed["protocolVersion"], result


@pytest.mark.parametrize(("version", "json_copy"), [("2024-11-05", True), ("2025-03-26", True),
                                                    ("2025-06-18", False), ("2025-11-25", False)])
def test_clients_older_than_structured_content_get_it_as_json_text_too(version, json_copy):
    agreed, result = asyncio.run(old_client(version, "calculator", {"expression": "6 * 7"}))
    assert agreed == version
    texts = [block["text"] for block in result["content"]]
    structured = {"expression": "6 * 7", "value": 42}
    assert texts == (["6 * 7 = 42", json.dumps(structured)] if json_copy else ["6 * 7 = 42"])
    assert result["structuredContent"] == structured


def test_stdio_python_prints_plots_keeps_state_and_stops_with_the_client(sessions, tmp_path):
    async def scenario() -> None:
        async with stdio_server({"DEMO_SESSIONS_DIR": str(sessions)}, tmp_path / "server.log") as client:
            printed = await client.call_tool("python", {"code": "x = 41\nprint('hello from the sandbox')"})
            assert not printed.is_error and text_of(printed) == "hello from the sandbox"
            assert processes_naming(sessions)  # the kernel runs, in its sandbox

            kept = await client.call_tool("python", {"code": "print(x + 1)"})
            assert text_of(kept) == "42"

            plot = await client.call_tool("python", {"code": PLOT})
            assert not plot.is_error and "[Figure 1 was displayed to the user.]" in text_of(plot)
            images = [block for block in plot.content if isinstance(block, types.ImageContent)]
            assert len(images) == 1 and images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(PNG_SIGNATURE)

            raised = await client.call_tool("python", {"code": "1 / 0"})
            assert raised.is_error and "ZeroDivisionError" in text_of(raised)

    asyncio.run(scenario())
    # The client closed the server's stdin and waited for it to exit: its kernel and folder went with it.
    assert_everything_stopped(sessions)


def test_without_a_sandbox_the_python_tool_is_not_offered_and_stderr_says_why(sessions, tmp_path):
    log = tmp_path / "server.log"
    env = {"DEMO_SESSIONS_DIR": str(sessions), "PATH": str(tmp_path)}  # no bwrap on this PATH

    async def scenario() -> set[str]:
        async with stdio_server(env, log) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    names = asyncio.run(scenario())
    assert "python" not in names and {"calculator", "open_url"} <= names
    assert "The python tool is not offered: The Python tool needs bubblewrap" in log.read_text()


# ----- Streamable HTTP ---------------------------------------------------------------------------------------------

@pytest.fixture
def site():
    """A local site with an article, and a SearXNG-style search (the browser's search backend) that finds it."""

    def search(handler, body):
        base = f"http://127.0.0.1:{handler.server.server_address[1]}"
        return json_reply({"results": [{"title": "Lighthouses of Brittany", "url": f"{base}/article",
                                        "content": "The Phare du Creac'h..."}]})

    with serve({"/article": html(ARTICLE), "/search": search}) as base:
        yield base


@asynccontextmanager
async def http_client(url: str, key: str) -> AsyncIterator[Client]:
    """The SDK's client over Streamable HTTP sending `key` as its Bearer token: headers go on an httpx2 client, given
    the SDK's own timeouts (httpx2's 5 s default would end a first python call, which starts the kernel)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def test_http_serves_the_tools_to_a_client_with_the_key_and_refuses_others(site, sessions, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # The local test site is allow-listed for the browser, as an administrator would do for an intranet.
    env = {**os.environ, "DEMO_SESSIONS_DIR": str(sessions), "DEMO_BROWSER_ALLOW": "127.0.0.1",
           "DEMO_SEARXNG_URL": site, "DEMO_MCP_API_KEY": KEY}
    command = [sys.executable, "-m", "app.frontends.mcp", "--http", "--port", str(port)]

    async def refused(key: str) -> None:
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True):  # raised inside the transport's task groups
            async with http_client(f"{base}/mcp", key):
                pass

    async def scenario() -> None:
        await refused("wrong-key")
        async with http_client(f"{base}/mcp", KEY) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"calculator", "python", "web_search", "open_url", "mclick"} <= names
            assert text_of(await client.call_tool("calculator", {"expression": "6 * 7"})) == "6 * 7 = 42"

            found = await client.call_tool("web_search", {"query": "lighthouses"})
            assert text_of(found).startswith(f"[1] Lighthouses of Brittany ({site}/article)")
            opened = await client.call_tool("mclick", {"ids": [1]})
            assert "32 nautical" in text_of(opened) and "Home | About" not in text_of(opened)
            page = await client.call_tool("open_url", {"url": f"{site}/article"})
            assert not page.is_error and text_of(page).startswith(f"[1] Lighthouses of Brittany ({site}/article)")

            await client.call_tool("python", {"code": "y = 20"})
            kept = await client.call_tool("python", {"code": "print(y + 1)"})
            assert not kept.is_error and text_of(kept) == "21"
            plot = await client.call_tool("python", {"code": PLOT})
            images = [block for block in plot.content if isinstance(block, types.ImageContent)]
            assert [image.mime_type for image in images] == ["image/png"]

    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=tmp_path / "server.log") as process:
        # The refusal is the SDK's bearer middleware's: 401 with a Bearer challenge, with or without a wrong key.
        for headers in ({"Authorization": "Bearer wrong-key"}, {}):
            answer = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
            assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer ")
        asyncio.run(scenario())
        assert processes_naming(sessions)  # the kernel is still there for the next client
    assert process.returncode is not None
    assert_everything_stopped(sessions)


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def ping(base: str, headers: dict[str, str]) -> httpx.Response:
    """A client's first request, as a browser page's fetch() would send it with these headers (an Origin, say)."""
    return httpx.post(f"{base}/mcp", json=INITIALIZE, headers={"Accept": "application/json, text/event-stream",
                                                                **headers})


def test_a_key_on_the_command_line_is_refused_with_what_to_do_instead(tmp_path):
    """Every user of the machine reads /proc/PID/cmdline: the key may not come from there."""
    for args in (["--api-key", KEY], [f"--api-key={KEY}"]):
        done = subprocess.run([sys.executable, "-m", "app.frontends.mcp", "--http", *args], cwd=ROOT, timeout=60,
                              capture_output=True, text=True, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
        assert done.returncode == 2, done.stderr
        assert "--api-key is not taken" in done.stderr and "/proc/PID/cmdline" in done.stderr
        assert "DEMO_MCP_API_KEY" in done.stderr and "--api-key-file" in done.stderr
    bad = subprocess.run([sys.executable, "-m", "app.frontends.mcp", "--http", "--allow-origin", "*"], cwd=ROOT,
                         timeout=60, capture_output=True, text=True)
    assert bad.returncode == 2 and "is not an origin: write scheme://host[:port]" in bad.stderr


def test_http_without_a_key_generates_one_and_refuses_other_local_web_apps(sessions, tmp_path):
    """No key configured: the first start generates one, keeps it 0600 in the state folder and prints it once; a
    request without it is refused, the SDK's client with it is served. A browser page of another local web app
    (Origin http://localhost:5173) is refused with the key too, unless --allow-origin lists it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k not in ("DEMO_MCP_API_KEY", "DEMO_MCP_ALLOW_ORIGINS")}
    env.update(DEMO_SESSIONS_DIR=str(sessions), XDG_STATE_HOME=str(state))
    command = [sys.executable, "-m", "app.frontends.mcp", "--http", "--port", str(port)]
    key_file = state / "composite-demo" / "mcp-api-key"

    async def served(key: str) -> set[str]:
        async with http_client(f"{base}/mcp", key) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=tmp_path / "first.log"):
        key = key_file.read_text().strip()
        assert len(key) >= 40 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert ping(base, {}).status_code == 401
        assert "calculator" in asyncio.run(served(key))
        bearer = {"Authorization": f"Bearer {key}"}
        assert ping(base, bearer).status_code == 200
        other_app = ping(base, {**bearer, "Origin": "http://localhost:5173"})
        assert other_app.status_code == 403 and "--allow-origin" in other_app.text
        assert ping(base, {**bearer, "Origin": base}).status_code == 403  # not even its own: it serves no pages
    assert (tmp_path / "first.log").read_text().count(key) == 1  # shown once, at its generation

    # The next start uses the same key, without printing it; a listed origin is served, with CORS headers.
    with server_process([*command, "--allow-origin", "http://localhost:5173/"], f"{base}/health", cwd=ROOT,
                        env=env, log=tmp_path / "second.log"):
        listed = ping(base, {"Authorization": f"Bearer {key}", "Origin": "http://localhost:5173"})
        assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == "http://localhost:5173"
        preflight = httpx.options(f"{base}/mcp", headers={"Origin": "http://localhost:5173",
                                                         "Access-Control-Request-Method": "POST",
                                                         "Access-Control-Request-Headers": "authorization"})
        assert preflight.status_code == 200
        assert ping(base, {"Authorization": f"Bearer {key}", "Origin": "http://localhost:5174"}).status_code == 403
    assert key not in (tmp_path / "second.log").read_text()


def test_http_takes_the_key_from_a_file(sessions, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    secret = tmp_path / "key"
    secret.write_text("from-a-file-8c1d\n")
    secret.chmod(0o600)
    env = {**os.environ, "DEMO_SESSIONS_DIR": str(sessions), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DEMO_MCP_API_KEY": "not-this-one"}
    command = [sys.executable, "-m", "app.frontends.mcp", "--http", "--port", str(port), "--api-key-file", str(secret)]
    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=tmp_path / "server.log"):
        assert ping(base, {"Authorization": "Bearer from-a-file-8c1d"}).status_code == 200
        assert ping(base, {"Authorization": "Bearer not-this-one"}).status_code == 401
    assert not (tmp_path / "state").exists()  # nothing generated
