"""Tools from MCP servers through the SDK's client, against real servers written with the SDK's server API
(examples/mcp_servers/demo_server.py): one started over stdio from an mcp.json, one on Streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from jsonschema import Draft202012Validator
from mcp import types
from PIL import Image

from app.agent.loop import ToolSettings, run_turn
from app.clients.client_protocol import GenerationParams, ToolRequest
from app.config import McpSettings
from app.domain.conversation import Conversation, Message
from app.mcp_client import McpConfigError, McpManager, StdioServer, bearer_server, load_config, mcp_registry
from app.mcp_client.server_config import HttpServer
from app.tools import load_tools
from app.tools.tool_registry import ToolError
from harness.local_http import free_port
from harness.processes import listening_process
from tests.helpers import TOOLS_PAGE, collect, open_app

SERVER = Path(__file__).parents[2] / "examples" / "mcp_servers" / "demo_server.py"
TOKEN = "s3cret-token"
BUILTINS = load_tools().names
DEMO_TOOLS = ["add", "echo", "paint", "demo_calculator", "process_id", "calls_seen", "crash", "hang", "fail",
              "picture", "documents"]  # `calculator` is also a built-in: the server's is namespaced


def write_config(folder: Path, servers: dict) -> Path:
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def stdio_entry() -> dict:
    return {"command": sys.executable, "args": [str(SERVER), "stdio"]}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("mcp"), {"demo": stdio_entry()})


@pytest.fixture(scope="module")
def manager(config_file: Path) -> Iterator[McpManager]:
    mcp = McpManager(McpSettings(config_path=str(config_file), connect_timeout_s=60))
    mcp.refresh(mcp.connections())
    yield mcp
    mcp.close()


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The demo server on Streamable HTTP, bearer TOKEN required; it also stops by itself once our end of its
    stdin closes."""
    port = free_port()
    with listening_process([sys.executable, str(SERVER), "http", str(port), TOKEN], port):
        yield f"http://127.0.0.1:{port}/mcp"


def demo_tools(mcp: McpManager):
    return mcp_registry(mcp, mcp.connections(), taken=BUILTINS)


# ----- listing ---------------------------------------------------------------------------------------------------

def test_the_tools_are_listed_with_the_servers_own_schemas(manager):
    (demo,) = manager.connections()
    assert demo.status().state == "connected" and demo.status().message == "connected · 11 tools"
    registry = demo_tools(manager)
    assert registry.names == DEMO_TOOLS
    add = registry.get("add")
    assert add.description == "Add two integers." and add.origin == "MCP server demo"
    listed = next(tool for tool in demo.tools if tool.name == "add")
    assert add.parameters["properties"] == listed.input_schema["properties"]
    assert add.parameters["required"] == ["a", "b"] and add.parameters["type"] == "object"
    assert registry.get("paint").parameters["properties"]["color"]["enum"] == ["red", "green", "blue"]


def test_name_clashes_between_servers_and_odd_names_are_namespaced(tmp_path, http_server):
    config = write_config(tmp_path, {"demo": stdio_entry(),
                                     "web": {"url": http_server, "headers": {"Authorization": f"Bearer {TOKEN}"}}})
    mcp = McpManager(McpSettings(config_path=str(config), connect_timeout_s=60))
    try:
        mcp.refresh(mcp.connections())
        registry = demo_tools(mcp)
        assert {"demo_echo", "web_echo", "demo_calculator", "web_calculator"} <= set(registry.names)
        assert "echo" not in registry.names
        assert registry.call("web_echo", {"text": "over HTTP"}).content == "over HTTP"
        assert registry.call("demo_echo", {"text": "over stdio"}).content == "over stdio"
    finally:
        mcp.close()

    def tool(name: str) -> types.Tool:
        return types.Tool(name=name, input_schema={"type": "object"})

    odd = [SimpleNamespace(name="a", tools=(tool("x.y"), tool("x_y"), tool("n" * 100))),
           SimpleNamespace(name="b", tools=(tool("weird name!"), tool("broken"))),
           SimpleNamespace(name="c", tools=(types.Tool(name="bad_schema", input_schema={"type": "array"}),))]
    mcp = McpManager(McpSettings(), servers={})
    try:
        names = mcp_registry(mcp, odd).names  # type: ignore[arg-type]
    finally:
        mcp.close()
    assert names == ["a_x_y", "a_x_y_2", "n" * 64, "weird_name_", "broken"]  # bad_schema is left out


# ----- calls through the agent loop with a (tiny, random) model ----------------------------------------------------

def test_a_call_round_trip_through_the_agent_loop(tiny_client, manager):
    conversation = Conversation([Message("user", "Add two numbers")])
    tools = ToolSettings(demo_tools(manager).subset(["add"]), choice="add", max_rounds=2)
    list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=300), tools=tools))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    call = conversation.messages[1].tool_calls[0]
    observation = conversation.messages[2]
    assert call.name == "add" and observation.tool_status == "ok"
    assert observation.content == str(call.arguments["a"] + call.arguments["b"])  # the server's answer


def test_a_forced_call_matches_the_mcp_tools_schema(tiny_client, manager):
    registry = demo_tools(manager)
    schema = next(tool for tool in manager.connections()[0].tools if tool.name == "paint").input_schema
    ask = [{"role": "user", "content": "Paint the wall"}]
    for seed in range(2):
        _, deltas = collect(tiny_client, ask, GenerationParams(temperature=1.0, max_new_tokens=3000, seed=seed),
                            ToolRequest(tuple(registry.schemas()), "paint"))
        (call,) = deltas[-1].tool_calls
        assert call.name == "paint"
        Draft202012Validator(schema).validate(call.arguments)
        result = registry.call("paint", call.arguments)
        assert result.ok and result.content == f"{call.arguments['coats']} coat(s) of {call.arguments['color']}"


def test_an_image_result_becomes_an_image_in_the_chat(tiny_client, manager):
    conversation = Conversation([Message("user", "Show me a picture")])
    tools = ToolSettings(demo_tools(manager).subset(["picture"]), choice="picture", max_rounds=2)
    list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=100), tools=tools))
    observation = conversation.messages[2]
    assert observation.tool_status == "ok" and "shown to the user" in observation.content
    (image,) = observation.attachments
    assert image.kind == "image" and Image.open(io.BytesIO(image.data)).size == (8, 6)


def test_text_resources_and_errors_from_the_server(manager):
    registry = demo_tools(manager)
    documents = registry.call("documents", {})
    assert documents.ok and documents.content == ("Two documents:\n[resource <memo://one>]\nThe first memo.\n"
                                                  "[resource second-memo <memo://two>: The second memo.]")
    failed = registry.call("fail", {})
    assert not failed.ok and "the sky is falling" in failed.content  # isError: the server's own message


def test_schema_invalid_arguments_are_refused_before_the_call(manager):
    registry = demo_tools(manager)
    seen = int(registry.call("calls_seen", {}).content)
    wrong = registry.call("add", {"a": "one", "b": 2})
    assert not wrong.ok and wrong.content == "Error: invalid arguments for add: a: 'one' is not of type 'integer'."
    unknown = registry.call("paint", {"color": "purple", "coats": 1, "note": ""})
    assert not unknown.ok and "'purple' is not one of ['red', 'green', 'blue']" in unknown.content
    assert int(registry.call("calls_seen", {}).content) == seen  # the server never saw them


# ----- servers that fail -------------------------------------------------------------------------------------------

def test_a_server_that_crashes_mid_call_gives_an_error_result_then_restarts(tiny_client, manager):
    registry = demo_tools(manager)
    before = int(registry.call("process_id", {}).content)
    conversation = Conversation([Message("user", "Crash")])
    tools = ToolSettings(registry.subset(["crash"]), choice="crash", max_rounds=2)
    list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=100), tools=tools))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]  # the turn went on
    observation = conversation.messages[2]
    assert observation.tool_status == "failed"
    assert observation.content.startswith("Error: the connection to the MCP server 'demo' broke during the call (")
    assert observation.content.endswith("); it is restarted on the next call.")
    status = manager.connections()[0].status()
    assert status.state == "error" and status.message.startswith("disconnected: ")
    after = registry.call("process_id", {})
    assert after.ok and int(after.content) != before  # a new server process answered
    assert manager.connections()[0].status().state == "connected"


def test_a_server_that_hangs_hits_the_time_limit_and_the_rest_keeps_working(config_file):
    quick = McpManager(McpSettings(config_path=str(config_file), call_timeout_s=2, connect_timeout_s=60))
    try:
        quick.refresh(quick.connections())
        registry = demo_tools(quick)
        hanging = registry.start("hang", {})
        # While it hangs, the same server, and the app's own tools, still answer.
        assert registry.call("echo", {"text": "still here"}).content == "still here"
        assert load_tools().call("calculator", {"expression": "6 * 7"}).content == "6 * 7 = 42"
        result = hanging.wait()
        assert result is not None and not result.ok
        assert result.content == "Error: the MCP server 'demo' did not answer within 2 s; the call was cancelled."
        assert registry.call("echo", {"text": "after"}).content == "after"
    finally:
        quick.close()


def test_a_server_that_is_down_shows_why_and_offers_no_tools(manager):
    port = free_port()  # nothing listens there
    mcp = McpManager(McpSettings(connect_timeout_s=10), servers={"gone": HttpServer(url=f"http://127.0.0.1:{port}/mcp")})
    try:
        mcp.refresh(mcp.connections())
        (gone,) = mcp.connections()
        assert gone.status().state == "error" and gone.status().message.startswith("cannot connect: ")
        assert demo_tools(mcp).names == []
        with pytest.raises(ToolError, match="the MCP server 'gone' is not available"):
            mcp.submit(gone.call("echo", {"text": "x"})).result(timeout=60)
    finally:
        mcp.close()


def test_a_wrong_bearer_token_is_named_as_the_likely_cause(http_server):
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers={"ok": bearer_server(http_server, TOKEN),
                                                                 "locked": bearer_server(http_server, "wrong")})
    try:
        mcp.refresh(mcp.connections())
        ok, locked = (connection.status() for connection in mcp.connections())
        assert ok.state == "connected" and ok.tool_count == 11
        assert locked.state == "error" and "HTTP 401" in locked.message and "bearer token" in locked.message
    finally:
        mcp.close()


def test_close_stops_the_stdio_servers(config_file):
    mcp = McpManager(McpSettings(config_path=str(config_file), connect_timeout_s=60))
    mcp.refresh(mcp.connections())
    pid = int(demo_tools(mcp).call("process_id", {}).content)
    mcp.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    mcp.close()  # twice is fine


# ----- configuration and who may add what ---------------------------------------------------------------------------

@pytest.mark.parametrize(("entry", "message"), [
    ({"demo": {"command": "x", "args": "--verbose"}}, "server 'demo': args: Input should be a valid list."),
    ({"demo": {"command": "x", "env": {"PORT": 8080}}}, "server 'demo': env.PORT: Input should be a valid string."),
    ({"demo": {"url": "ftp://example.com"}}, "server 'demo': url: must be an http:// or https:// URL with a host."),
    ({"demo": {"url": "https://example.com/mcp", "token": "x"}},
     "server 'demo': token: Extra inputs are not permitted."),
    ({"demo": {"args": ["x"]}}, "server 'demo': needs either command (a stdio server) or url"),
    ({"my server": {"command": "x"}}, "server 'my server': a server name may use letters, digits, _ and -"),
    ({"demo": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${NO_SUCH_VARIABLE_SET}"}}},
     "server 'demo': headers: the environment variable NO_SUCH_VARIABLE_SET is not set."),
])
def test_a_bad_mcp_json_says_which_server_and_field(tmp_path, entry, message):
    path = write_config(tmp_path, entry)
    with pytest.raises(McpConfigError) as caught:
        load_config(str(path))
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    mcp = McpManager(McpSettings(config_path=str(path)))  # the app keeps working, without configured servers
    try:
        assert mcp.config_error == str(caught.value) and mcp.connections() == []
    finally:
        mcp.close()


def test_broken_json_and_the_common_shapes(tmp_path, monkeypatch):
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {"demo": {"command": "x",}}}')
    with pytest.raises(McpConfigError, match=r"not valid JSON \(Expecting property name .* line 1, column 41\)"):
        load_config(str(broken))
    with pytest.raises(McpConfigError, match=r'expected \{"mcpServers": \{...\}\}, found the key\(s\) servers'):
        load_config(_json(tmp_path, {"servers": {}}))
    monkeypatch.setenv("DOCS_TOKEN", "t0ken")
    servers = load_config(str(write_config(tmp_path, {
        "local": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "Europe/Paris"}},
        "docs": {"type": "http", "url": "https://example.com/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
    })))
    assert servers["local"] == StdioServer(command="uvx", args=["mcp-server-time"], env={"TZ": "Europe/Paris"})
    assert servers["docs"].headers == {"Authorization": "Bearer t0ken"}


def _json(folder: Path, data: dict) -> str:
    path = folder / "other.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_settings_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("DEMO_MCP_CONFIG", "DEMO_MCP_CALL_TIMEOUT_S", "DEMO_MCP_CONNECT_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    assert McpSettings.from_env() == McpSettings()  # no mcp.json here: no servers
    (tmp_path / "mcp.json").write_text('{"mcpServers": {}}')
    assert McpSettings.from_env().config_path == str(tmp_path / "mcp.json")
    monkeypatch.setenv("DEMO_MCP_CONFIG", "/etc/demo/mcp.json")
    monkeypatch.setenv("DEMO_MCP_CALL_TIMEOUT_S", "5")
    assert McpSettings.from_env() == McpSettings("/etc/demo/mcp.json", call_timeout_s=5.0)
    monkeypatch.setenv("DEMO_MCP_CALL_TIMEOUT_S", "0")
    with pytest.raises(ValueError, match="must be positive"):
        McpSettings.from_env()


def test_users_add_only_http_servers_that_pass_the_ssrf_guard_for_themselves(monkeypatch, http_server):
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers={})
    try:
        with pytest.raises(McpConfigError, match="refused to open .* a private, local or reserved address"):
            mcp.add_server("alice", "local", bearer_server(http_server, TOKEN))
        with pytest.raises(McpConfigError, match="only Streamable HTTP servers can be added"):
            mcp.add_server("alice", "shell", StdioServer(command="sh", args=["-c", "id"]))  # type: ignore[arg-type]
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
        mine = mcp.add_server("alice", "local", bearer_server(http_server, TOKEN))
        mcp.refresh([mine])
        assert [c.name for c in mcp.connections("alice")] == ["local"] and mcp.connections("bob") == []
        assert mcp_registry(mcp, mcp.connections("alice")).call("echo", {"text": "mine"}).content == "mine"
        with pytest.raises(McpConfigError, match="already a server named 'local'"):
            mcp.add_server("alice", "local", bearer_server(http_server, TOKEN))
        mcp.release("alice")
        assert mcp.connections("alice") == []
    finally:
        mcp.close()


# ----- the Tools page ----------------------------------------------------------------------------------------------

def test_the_tools_page_shows_mcp_tools_as_toggles_and_the_servers_status(monkeypatch, tiny_model_dir, config_file,
                                                                          http_server):
    monkeypatch.setenv("DEMO_MCP_CONFIG", str(config_file))
    monkeypatch.delenv("DEMO_BROWSER_ALLOW", raising=False)
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE, timeout=180) as at:
        assert all(at.toggle(key=f"settings.tools.enabled.{name}").value for name in ["echo", "demo_calculator"])
        assert at.toggle(key="settings.tools.enabled.calculator").value  # the built-in keeps its name
        assert "paint" in at.selectbox(key="settings.tools.choice").options
        assert any("**demo** · stdio · mcp.json" in m.value for m in at.sidebar.markdown)
        assert "connected · 11 tools" in [c.value for c in at.sidebar.caption]

        def add_server() -> None:
            at.text_input(key="mcp.new.name").input("web")
            at.text_input(key="mcp.new.url").input(http_server)
            at.text_input(key="mcp.new.token").input(TOKEN)
            at.button(key="mcp.new.add").click().run()
            assert not at.exception

        add_server()  # 127.0.0.1 is not allowed for users
        assert at.sidebar.error[0].value.startswith("Not added: refused to open http://127.0.0.1")
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
        add_server()
        assert at.sidebar.success[0].value.startswith("Added web: connected · 11 tools")
        assert at.toggle(key="settings.tools.enabled.web_echo").value
        assert at.toggle(key="settings.tools.enabled.demo_echo").value
        at.button(key="mcp.remove.web").click().run()
        assert not at.exception
        assert at.toggle(key="settings.tools.enabled.echo").value  # no clash any more
        assert "web_echo" not in at.selectbox(key="settings.tools.choice").options
