"""MCP beyond tools, client side: prompts, resources (and templates) and structured results, through the SDK's
client against the real demo server (examples/mcp_servers/demo_server.py, over stdio from an mcp.json, and over
Streamable HTTP), the app's own MCP server at the protocol versions the SDK lets a client choose, and the Tools
page in AppTest: a prompt put into the message box, a resource attached to the sent message and reaching the
model's prompt, a structured result shown in its card and still there after a reload. Hostile servers too: a
prompt with 500 arguments or the same one twice, a resource over the upload limit, a server that fails on
get_prompt."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp import types
from mcp.types.version import LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSIONS
from PIL import Image

from app.agent.attachments import user_message
from app.agent.loop import ToolSettings, run_turn
from app.clients.client_protocol import GenerationParams
from app.config import McpSettings
from app.domain.conversation import Conversation, Message
from app.mcp_client import McpManager, StdioServer, bearer_server, mcp_registry
from app.mcp_client.call_results import to_output
from app.mcp_client.prompts import MAX_PROMPT_CHARS, PromptError, arguments_of, filled, prompt_text
from app.mcp_client.resources import (
    MAX_UPLOAD_BYTES,
    ResourceError,
    attachments_of,
    check_declared_size,
    expand,
    template_variables,
)
from app.storage.codec import conversation_to_markdown, decode_message, encode_message
from app.tools import load_tools
from app.tools.tool_registry import ToolError
from tests.api.test_mcp_client import SERVER, TOKEN, http_server, write_config  # noqa: F401 (a fixture)
from tests.helpers import ALL_TOOLS_PAGE, MAIN, ROOT, TOOLS_PAGE, open_app

SEP = "\x1f"  # between a server's name and a prompt's name or a resource's URI in the pages' option ids


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


def prompt_named(mcp: McpManager, name: str) -> types.Prompt:
    return next(prompt for _, prompt in mcp.list_prompts(mcp.connections()).items if prompt.name == name)


# ----- prompts ----------------------------------------------------------------------------------------------------

def test_prompts_are_listed_with_their_arguments_and_filled_by_the_server(manager):
    listed = manager.list_prompts(manager.connections())
    assert listed.problems == []
    assert [prompt.name for _, prompt in listed.items] == ["review", "tour", "broken", "sprawling", "muddled"]
    review = prompt_named(manager, "review")
    assert review.title == "Code review" and review.description == "Ask for a review of some code."
    assert [(a.name, a.required) for a in arguments_of(review)] == [("code", True), ("language", False)]
    (demo,) = manager.connections()
    arguments = filled(review, {"code": "x = 1", "language": ""})
    assert arguments == {"code": "x = 1"}  # an optional argument left empty is not sent
    text = prompt_text(manager.get_prompt(demo, "review", arguments))
    assert text.text == "Please review this python code:\n\nx = 1" and text.notes == ()
    assert manager.list_prompts(manager.connections()).items[0][1] is listed.items[0][1]  # kept for a while


def test_a_prompt_of_several_messages_keeps_the_text_and_notes_what_a_message_box_cannot_take(manager):
    (demo,) = manager.connections()
    text = prompt_text(manager.get_prompt(demo, "tour", {"place": "Lyon"}))
    assert text.text == "Plan a day in Lyon.\n\nAssistant: Start with breakfast by the river."
    assert text.notes == ("a picture in the prompt was left out: the message box takes text only.",)


def test_hostile_prompts_are_refused_with_a_reason(manager):
    with pytest.raises(PromptError, match="it declares 500 arguments; at most 20 can be filled in here"):
        arguments_of(prompt_named(manager, "sprawling"))
    with pytest.raises(PromptError, match="it declares the argument 'topic' twice"):
        arguments_of(prompt_named(manager, "muddled"))
    with pytest.raises(PromptError, match=r"fill in 'code': it is required"):
        filled(prompt_named(manager, "review"), {"code": "   "})
    with pytest.raises(PromptError, match="at most 10,000 are sent"):
        filled(prompt_named(manager, "review"), {"code": "x" * 10_001})
    (demo,) = manager.connections()
    with pytest.raises(ToolError, match="^the MCP server 'demo' refused the prompt request: the prompt about cats is "
                                        "out of order$"):
        manager.get_prompt(demo, "broken", {"topic": "cats"})
    with pytest.raises(ToolError, match="refused the prompt request"):
        manager.get_prompt(demo, "no_such_prompt", {})
    assert demo.status().state == "connected"  # a refusal is no broken connection


def test_listings_follow_pages_and_stop_at_their_limits():
    import anyio

    from app.mcp_client.connection import MAX_LISTED, _pages

    asked: list[str | None] = []

    async def endless(cursor: str | None) -> SimpleNamespace:  # a server whose every page names a next one
        asked.append(cursor)
        number = int(cursor or 0)
        return SimpleNamespace(prompts=[f"p{number}"], next_cursor=str(number + 1))

    assert anyio.run(_pages, endless, "prompts") == tuple(f"p{n}" for n in range(100))
    assert asked[:3] == [None, "1", "2"] and len(asked) == 100

    async def crowded(cursor: str | None) -> SimpleNamespace:  # pages of 600: cut at MAX_LISTED
        return SimpleNamespace(resources=list(range(600)), next_cursor="more")

    assert len(anyio.run(_pages, crowded, "resources")) == MAX_LISTED


def test_a_huge_prompt_text_is_cut_with_a_note():
    long = types.GetPromptResult(messages=[types.PromptMessage(role="user", content=types.TextContent(
        type="text", text="y" * (MAX_PROMPT_CHARS + 5)))])
    text = prompt_text(long)
    assert len(text.text) == MAX_PROMPT_CHARS and "cut to its first 100,000 of 100,005 characters" in text.notes[0]
    odd = types.Prompt(name="odd", arguments=[types.PromptArgument(name="")])
    with pytest.raises(PromptError, match="an empty or over-long name"):
        arguments_of(odd)


# ----- resources --------------------------------------------------------------------------------------------------

def test_resources_become_attachments_like_uploads(manager):
    (demo,) = manager.connections()
    listed = manager.list_resources(manager.connections())
    assert [resource.uri for _, resource in listed.items] == ["memo://readme", "image://red", "blob://data",
                                                              "memo://huge"]
    (readme,) = attachments_of(manager.read_resource(demo, "memo://readme"), "The demo server's readme").attachments
    assert readme.kind == "document" and "PELICAN" in readme.text and readme.name == "The demo server's readme"
    (red,) = attachments_of(manager.read_resource(demo, "image://red"), "red").attachments
    assert red.kind == "image" and Image.open(io.BytesIO(red.data)).size == (8, 6)
    message = user_message("What word?", ready=[red, readme])
    assert message is not None and message.images == [red]
    assert "<document name=\"The demo server's readme\">" in message.prompt_text()  # what the model reads


def test_resources_that_cannot_be_attached_say_why(manager):
    (demo,) = manager.connections()
    with pytest.raises(ResourceError, match=r"^raw is a binary resource \(application/octet-stream, 1,024 bytes\): "
                                            "only text, pictures and PDF, Word or PowerPoint documents"):
        attachments_of(manager.read_resource(demo, "blob://data"), "raw")
    with pytest.raises(ResourceError, match=r"^huge is 22\.0 MB; resources up to 20 MB can be attached"):
        attachments_of(manager.read_resource(demo, "memo://huge"), "huge")
    with pytest.raises(ToolError, match="refused the resource read"):
        manager.read_resource(demo, "memo://nothing-here")
    declared = types.Resource(name="big", uri="file:///big", size=MAX_UPLOAD_BYTES + 1)
    with pytest.raises(ResourceError, match="big is 21.0 MB"):
        check_declared_size(declared)  # refused before it is read
    def blob(data: str) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[types.BlobResourceContents(uri="x://", blob=data,
                                                                             mime_type="image/png")])

    broken = blob("!!!")
    with pytest.raises(ResourceError, match="not valid base64"):
        attachments_of(broken, "broken")
    fake = base64.b64encode(b"not a picture").decode()
    picture = blob(fake)
    with pytest.raises(ResourceError, match="picture"):
        attachments_of(picture, "picture")
    assert demo.status().state == "connected"


def test_a_simple_template_is_filled_with_percent_encoded_values(manager):
    (demo,) = manager.connections()
    ((_, template),) = manager.list_resource_templates(manager.connections()).items
    assert template_variables(template) == ("topic",)
    uri = expand(template, {"topic": "a b/../c?d"})
    assert uri == "memo://notes/a%20b%2F..%2Fc%3Fd"  # a value cannot add a path or a query
    (notes,) = attachments_of(manager.read_resource(demo, uri), uri).attachments
    assert notes.text == "Notes about a b/../c?d: none yet."
    with pytest.raises(ResourceError, match="fill in 'topic'"):
        expand(template, {})
    assert template_variables(types.ResourceTemplate(name="t", uri_template="file:///{+path}")) is None


def test_prompts_and_resources_over_streamable_http(http_server):  # noqa: F811
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers={"web": bearer_server(http_server, TOKEN)})
    try:
        mcp.refresh(mcp.connections())
        (web,) = mcp.connections()
        assert "review" in [prompt.name for _, prompt in mcp.list_prompts([web]).items]
        assert prompt_text(mcp.get_prompt(web, "review", {"code": "pass"})).text.endswith("pass")
        (readme,) = attachments_of(mcp.read_resource(web, "memo://readme"), "readme").attachments
        assert "PELICAN" in readme.text
    finally:
        mcp.close()


def test_a_server_that_is_not_connected_is_not_listed():
    mcp = McpManager(McpSettings(connect_timeout_s=5), servers={"gone": StdioServer(command="/no/such/command")})
    try:
        assert mcp.list_prompts(mcp.connections()).items == [] and mcp.list_resources(mcp.connections()).items == []
    finally:
        mcp.close()


# ----- structured results -----------------------------------------------------------------------------------------

def test_structured_results_reach_the_tool_message_and_the_model_reads_them_once(tiny_client, manager):
    registry = mcp_registry(manager, manager.connections(), taken=load_tools().names)
    added = registry.call("add", {"a": 2, "b": 3})
    assert added.content == "5" and added.structured == {"result": 5}  # the SDK's {"result": ...}: not repeated

    conversation = Conversation([Message("user", "Add two numbers")])
    tools = ToolSettings(registry.subset(["add"]), choice="add", max_rounds=2)
    list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=300), tools=tools))
    call, observation = conversation.messages[1].tool_calls[0], conversation.messages[2]
    assert observation.structured == {"result": call.arguments["a"] + call.arguments["b"]}

    def result(text: str | None, structured: object) -> types.CallToolResult:
        content = [] if text is None else [types.TextContent(type="text", text=text)]
        return types.CallToolResult(content=content, structured_content=structured)  # type: ignore[arg-type]

    data = {"place": "Paris", "temperature": 8.1}
    assert to_output(result(json.dumps(data, indent=2), data), "t").text == json.dumps(data, indent=2)
    said = to_output(result("Paris: 8.1 °C", data), "t")  # text that says it in words: the JSON follows
    assert said.text == 'Paris: 8.1 °C\n{"place": "Paris", "temperature": 8.1}' and said.structured == data
    assert to_output(result(None, data), "t").text == json.dumps(data)
    listed = to_output(result(None, [1, 2]), "t")  # MCP 2026-07-28 allows any JSON value: read, not kept as data
    assert listed.text == "[1, 2]" and listed.structured is None
    # The app's own tools write their text for the model; their structured result is kept beside it.
    calculated = load_tools().call("calculator", {"expression": "6 * 7"})
    assert calculated.content == "6 * 7 = 42" and calculated.structured == {"expression": "6 * 7", "value": 42}


def test_a_structured_result_is_stored_exported_and_old_records_still_load():
    message = Message("tool", "5", tool_call_id="call_1", name="add", tool_status="ok", structured={"result": 5})
    record = encode_message(message)
    assert record["structured"] == {"result": 5} and decode_message(record) == message
    old = {"role": "tool", "content": "5", "tool_call_id": "call_1", "tool_status": "ok"}  # written before
    assert decode_message(old).structured is None
    exported = conversation_to_markdown("Sum", [message])
    assert '**Structured result**\n\n```json\n{\n  "result": 5\n}\n```' in exported


# ----- the app's own server, through our client ---------------------------------------------------------------------

def test_our_client_and_our_server_agree_on_the_newest_protocol(tmp_path):
    """The connection's Client negotiates ("auto"); the SDK's other choices are a handshake (it offers
    LATEST_HANDSHAKE_VERSION) or a pinned modern version. Older handshake versions: tests/api/test_mcp_server.py."""
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    env = {"DEMO_SESSIONS_DIR": str(tmp_path)}
    server = StdioServer(command=sys.executable, args=["-m", "app.frontends.mcp"], cwd=str(ROOT), env=env)
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers={"app": server})
    try:
        mcp.refresh(mcp.connections())
        (app_server,) = mcp.connections()
        assert app_server.status().state == "connected"
        assert app_server.protocol_version == LATEST_PROTOCOL_VERSION == MODERN_PROTOCOL_VERSIONS[-1]
        calculated = mcp_registry(mcp, [app_server]).call("calculator", {"expression": "6 * 7"})
        assert calculated.structured == {"expression": "6 * 7", "value": 42}
        assert calculated.content == '6 * 7 = 42\n{"expression": "6 * 7", "value": 42}'  # words, then the data
    finally:
        mcp.close()

    async def negotiated(mode: str) -> str:
        parameters = StdioServerParameters(command=sys.executable, args=["-m", "app.frontends.mcp"], cwd=str(ROOT),
                                           env=env)
        async with Client(stdio_client(parameters), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            assert "calculator" in [tool.name for tool in (await client.list_tools()).tools]
            return client.protocol_version

    assert anyio.run(negotiated, "legacy") == LATEST_HANDSHAKE_VERSION
    for version in MODERN_PROTOCOL_VERSIONS:
        assert anyio.run(negotiated, version) == version


# ----- the Tools page ---------------------------------------------------------------------------------------------

@pytest.fixture
def tools_page(monkeypatch, tiny_model_dir, config_file, database):
    monkeypatch.setenv("DEMO_MCP_CONFIG", str(config_file))
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE, timeout=180, temperature=0.0,
                  max_new_tokens=300) as at:
        yield at


def notice(at) -> str:
    shown = [*at.sidebar.success, *at.sidebar.warning, *at.sidebar.error]
    return " | ".join(element.value for element in shown)


def choose_prompt(at, name: str) -> None:
    at.selectbox(key="mcp.library.tools.prompt").set_value(f"demo{SEP}{name}").run()
    assert not at.exception


def test_the_page_puts_a_prompt_into_the_message_box(tools_page):
    at = tools_page
    assert at.selectbox(key="mcp.library.tools.prompt").options == [
        "demo · Code review", "demo · tour", "demo · broken", "demo · sprawling", "demo · muddled"]
    choose_prompt(at, "review")
    at.button(key="mcp.library.tools.insert").click().run()  # the required code is missing
    assert not at.exception and "fill in 'code': it is required" in notice(at)
    assert at.chat_input(key="tools_input").proto.value == ""
    at.text_input(key=f"mcp.library.tools.argument.demo{SEP}review.code").input("print('hi')")
    at.button(key="mcp.library.tools.insert").click().run()
    assert not at.exception and "is in the message box" in notice(at)
    box = at.chat_input(key="tools_input").proto
    assert box.set_value and box.value == "Please review this python code:\n\nprint('hi')"
    assert len(at.chat_message) == 0  # put in the box, not sent


def test_the_page_says_why_a_prompt_cannot_be_used_and_stays_up(tools_page):
    at = tools_page
    choose_prompt(at, "sprawling")
    assert "This prompt cannot be used: it declares 500 arguments" in notice(at)
    choose_prompt(at, "broken")
    at.text_input(key=f"mcp.library.tools.argument.demo{SEP}broken.topic").input("cats")
    at.button(key="mcp.library.tools.insert").click().run()
    assert not at.exception
    assert "The prompt broken could not be used: the MCP server 'demo' refused the prompt request: the prompt " \
           "about cats is out of order" in notice(at)
    at.chat_input(key="tools_input").set_value("Still here?").run()
    assert not at.exception and len(at.chat_message) == 2


def test_an_attached_resource_goes_with_the_next_message_into_the_models_prompt(tools_page, monkeypatch, database):
    import app.agent.loop

    prompts: list[list[dict]] = []
    original = app.agent.loop.process_input

    def recorded(*args, **kwargs):
        prompts.append(original(*args, **kwargs))
        return prompts[-1]

    monkeypatch.setattr(app.agent.loop, "process_input", recorded)
    at = tools_page
    at.selectbox(key="settings.tools.choice").set_value("none").run()
    at.selectbox(key="mcp.library.tools.resource").set_value(f"demo{SEP}memo://huge").run()
    at.button(key="mcp.library.tools.attach").click().run()
    assert not at.exception and "Not attached: huge is 22.0 MB" in notice(at)
    for uri in ("memo://readme", "image://red"):
        at.selectbox(key="mcp.library.tools.resource").set_value(f"demo{SEP}{uri}").run()
        at.button(key="mcp.library.tools.attach").click().run()
        assert not at.exception and "will be attached to your next message" in notice(at)
    assert "The demo server's readme \\(92 characters\\)" in [c.value for c in at.sidebar.caption]  # as plain text
    at.chat_input(key="tools_input").set_value("Which word should I remember?").run()
    assert not at.exception
    (entry,) = database.list("local", page="tools")
    sent = database.get("local", entry.id).messages[0]
    assert [a.kind for a in sent.attachments] == ["image", "document"] and "PELICAN" in sent.attachments[1].text
    user_turn = prompts[0][-1]
    assert user_turn["role"] == "user" and "PELICAN" in json.dumps(user_turn["content"])
    assert "Attached to your next message:" not in [c.value for c in at.sidebar.caption]  # used up


def test_a_structured_result_shows_in_its_card_and_after_a_reload(tools_page, database):
    at = tools_page
    at.selectbox(key="settings.tools.choice").set_value("add").run()
    at.chat_input(key="tools_input").set_value("Add two numbers").run()
    assert not at.exception
    (run,) = [button for button in at.button if button.key.startswith("approval_run/tools/")]  # a server's tool asks
    run.click().run()
    assert not at.exception
    card = at.chat_message[1].status[0]
    assert [c.value for c in card.caption] == ["Arguments", "Result", "Structured result"]
    (shown,) = card.json
    result = json.loads(shown.value)
    assert set(result) == {"result"}

    from streamlit.testing.v1 import AppTest

    (entry,) = database.list("local", page="tools")
    stored = database.get("local", entry.id).messages[2]
    assert stored.role == "tool" and stored.structured == result
    again = AppTest.from_file(MAIN, default_timeout=180)
    again.switch_page(TOOLS_PAGE)  # a refresh of the page: the Tools page with its link
    again.query_params["c"] = entry.id
    again.run()
    assert not again.exception
    assert json.loads(again.chat_message[1].status[0].json[0].value) == result


def test_the_all_tools_page_attaches_a_resource_next_to_an_uploaded_file(monkeypatch, tiny_model_dir, config_file,
                                                                          database):
    monkeypatch.setenv("DEMO_MCP_CONFIG", str(config_file))
    with open_app(monkeypatch, tiny_model_dir, page=ALL_TOOLS_PAGE, timeout=180, max_new_tokens=20) as at:
        at.selectbox(key="settings.all_tools.choice").set_value("none").run()
        at.selectbox(key="mcp.library.all_tools.resource").set_value(f"demo{SEP}memo://readme").run()
        at.button(key="mcp.library.all_tools.attach").click().run()
        assert not at.exception and "will be attached to your next message" in notice(at)
        box = at.chat_input(key="all_tools_input")
        box.upload("notes.txt", b"An uploaded note.")
        box.set_value("Two documents").run()
        assert not at.exception
        (entry,) = database.list("local", page="all_tools")
        sent = database.get("local", entry.id).messages[0]
        assert [(a.name, a.text) for a in sent.attachments] == [
            ("notes.txt", "An uploaded note."),
            ("The demo server's readme", "The demo server answers from examples/mcp_servers/demo_server.py. Remember "
                                         "the word PELICAN.")]
