"""Tools under the user's control: each tool's run policy (app/tools/policy.py: what its hints make of it, what
mcp.json sets, what the user chooses) and the agent loop that honours it (app/agent/loop.py): "never" tools are not
offered, "ask" calls pause the turn until the user decides (run, run edited, deny), and the pause is nothing but the
conversation, which the real store keeps across a restart and an export.

The model is a ScriptedClient (tests/fake_client.py); the tools are real registry tools, one of them with an effect
the tests can see (a ledger it writes to)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from mcp import types

from app.agent.loop import (
    DECLINED,
    ApprovalNeeded,
    Decision,
    ToolCallFinished,
    ToolCallStarted,
    ToolSettings,
    TurnDone,
    pending_calls,
    resume_turn,
    run_turn,
)
from app.clients.client_protocol import GenerationParams
from app.config import McpSettings, SandboxLimits
from app.domain.conversation import Conversation, Message, ToolCall
from app.mcp_client import McpConfigError, McpManager, mcp_registry
from app.mcp_client.server_config import parse_config, policy_defaults
from app.storage import ConversationStore, open_database
from app.storage.codec import decode_message_json, encode_message_json
from app.tools import load_tools
from app.tools.policy import PolicyDefaults, RunPolicy, ServerPolicies, default_policy, imported_policies, policy_for
from app.tools.session import SessionTools
from app.tools.tool_registry import Tool, ToolHints, ToolRegistry, function_schema
from tests.fake_client import ScriptedClient, call_reply, text_reply

PARAMS = GenerationParams(temperature=0.0, max_new_tokens=16)


def kinds(events) -> list[str]:
    return [type(event).__name__ for event in events]


# ----- what a tool's own hints make of it ---------------------------------------------------------------------------

@pytest.fixture
def session_tools(monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionTools]:
    monkeypatch.setenv("DEMO_IMAGE_API_URL", "https://images.example.com/v1")  # generate_image is offered
    tools = SessionTools(SandboxLimits())
    yield tools
    tools.close()


def test_the_apps_own_tools_run_unless_they_reach_out_and_change_things(session_tools):
    own = load_tools().merged(session_tools.registry())
    policies = {tool.name: default_policy(tool) for tool in own}
    # Reading, computing (also out on the web), and code in its sandbox run; a picture made on a service asks.
    assert {name: policies[name] for name in ("calculator", "convert_units", "current_time", "random_number",
                                              "get_weather", "web_search", "open_url", "mclick", "python",
                                              "generate_image")} == {
        "calculator": "auto", "convert_units": "auto", "current_time": "auto", "random_number": "auto",
        "get_weather": "auto", "web_search": "auto", "open_url": "auto", "mclick": "auto", "python": "auto",
        "generate_image": "ask"}


@pytest.mark.parametrize("limits", [SandboxLimits(network=True), SandboxLimits(isolation="none")])
def test_python_asks_once_its_code_can_reach_out(limits):
    tools = SessionTools(limits)
    try:
        python = tools.registry().get("python")
        assert python is not None and default_policy(python) == "ask"
    finally:
        tools.close()


def _tool(hints: ToolHints, origin: str = "MCP server docs", name: str = "lookup") -> Tool:
    return Tool(name, lambda: "ok", function_schema(name, "", {"type": "object", "properties": {}}), origin=origin,
                hints=hints)


HINT_CASES: dict[str, tuple[ToolHints, RunPolicy, RunPolicy]] = {
    # hints: (for an MCP server's tool, for the app's own)
    "unannotated": (ToolHints(), "ask", "ask"),
    "read-only, closed world": (ToolHints(read_only=True, open_world=False), "auto", "auto"),
    "read-only, world unsaid": (ToolHints(read_only=True), "ask", "auto"),
    "read-only, open world": (ToolHints(read_only=True, open_world=True), "ask", "auto"),
    "read-only, says destructive (moot)": (ToolHints(read_only=True, destructive=True, open_world=False), "auto",
                                           "auto"),
    "changes things, closed world": (ToolHints(read_only=False, destructive=False, open_world=False), "ask", "auto"),
    "destructive, closed world": (ToolHints(read_only=False, destructive=True, open_world=False), "ask", "ask"),
    "adds, open world": (ToolHints(read_only=False, destructive=False, open_world=True), "ask", "ask"),
}


@pytest.mark.parametrize("case", HINT_CASES)
def test_an_mcp_tool_runs_only_when_it_says_it_reads_a_closed_world(case):
    hints, mcp, own = HINT_CASES[case]
    assert default_policy(_tool(hints)) == mcp
    assert default_policy(_tool(hints, origin="")) == own  # the app's own hints are trusted further


# ----- what mcp.json sets, and the order -------------------------------------------------------------------------

def test_mcp_json_sets_policies_per_server_and_per_tool():
    servers = parse_config({"mcpServers": {
        "docs": {"url": "https://docs.example.com/mcp", "policy": "never", "tools": {"search.pages": "auto"}},
        "files": {"command": "files-server", "tools": {"delete_file": "ask", "read_file": "auto"}},
        "time": {"command": "time-server"},
    }})
    assert (servers["docs"].policy, servers["docs"].tools) == ("never", {"search.pages": "auto"})
    assert policy_defaults(servers) == PolicyDefaults({
        "docs": ServerPolicies("never", {"search.pages": "auto"}),
        "files": ServerPolicies(None, {"delete_file": "ask", "read_file": "auto"})})  # time sets none


@pytest.mark.parametrize(("entry", "message"), [
    ({"command": "x", "policy": "sometimes"}, "server 'docs': policy: Input should be 'auto', 'ask' or 'never'."),
    ({"url": "https://example.com/mcp", "tools": {"search": "yes"}},
     "server 'docs': tools.search: Input should be 'auto', 'ask' or 'never'."),
    ({"command": "x", "tools": ["search"]}, "server 'docs': tools: Input should be a valid dictionary."),
    ({"command": "x", "tools": {"": "ask"}}, "server 'docs': tools: a tool's name must not be empty."),
    ({"command": "x", "policies": "ask"}, "server 'docs': policies: Extra inputs are not permitted."),
    ({"command": "x", "policy": None, "tools": {"search": None}}, "server 'docs': tools.search: Input should be"),
])
def test_a_wrong_policy_in_mcp_json_says_which_server_and_field(entry, message):
    with pytest.raises(McpConfigError) as caught:
        parse_config({"mcpServers": {"docs": entry}}, where="mcp.json")
    assert str(caught.value).startswith(f"mcp.json: {message}")


def test_the_users_choice_beats_the_tools_setting_which_beats_the_servers_which_beats_the_hints():
    reader = _tool(ToolHints(read_only=True, open_world=False))  # by its hints: auto
    assert policy_for(reader, {}) == "auto"
    assert policy_for(reader, {}, PolicyDefaults({"docs": ServerPolicies("ask")})) == "ask"
    assert policy_for(reader, {}, PolicyDefaults({"docs": ServerPolicies("ask", {"lookup": "never"})})) == "never"
    assert policy_for(reader, {"lookup": "auto"}, PolicyDefaults({"docs": ServerPolicies("ask")})) == "auto"
    assert policy_for(reader, {"lookup": "never"}, PolicyDefaults({"docs": ServerPolicies("auto")})) == "never"
    # Another server's settings and other tools' overrides do not apply; the app's own tools have no server.
    elsewhere = PolicyDefaults({"files": ServerPolicies("never", {"lookup": "never"})})
    assert policy_for(reader, {"other": "never"}, elsewhere) == "auto"
    assert policy_for(_tool(ToolHints(read_only=True), origin=""), {}, elsewhere) == "auto"
    with pytest.raises(ValueError, match="'maybe' is not a run policy for lookup"):
        policy_for(reader, {"lookup": "maybe"})  # type: ignore[dict-item]


def test_the_administrators_tool_names_are_the_servers_own_whatever_the_registry_calls_them():
    """mcp_registry renames tools to fit and not to clash (app/mcp_client/mcp_tools.py): mcp.json names them as the
    server does, and each setting still finds its tool."""
    def tool(name: str) -> types.Tool:
        return types.Tool(name=name, input_schema={"type": "object"},
                          annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False))

    connections = [SimpleNamespace(name="a", tools=(tool("x.y"), tool("x_y"), tool("calculator"), tool("free"))),
                   SimpleNamespace(name="b", tools=(tool("weird name!"), tool("free_2")))]
    manager = McpManager(McpSettings(), servers={})
    try:
        registry = mcp_registry(manager, connections, taken=["calculator"])  # type: ignore[arg-type]
    finally:
        manager.close()
    assert registry.names == ["a_x_y", "a_x_y_2", "a_calculator", "free", "weird_name_", "free_2"]
    defaults = policy_defaults(parse_config({"mcpServers": {
        "a": {"command": "x", "tools": {"calculator": "never", "x.y": "ask", "x_y": "auto"}},
        "b": {"command": "x", "tools": {"weird name!": "never", "free": "never"}}}}))
    policies = {tool.name: policy_for(tool, {}, defaults) for tool in registry}
    assert policies == {
        "a_calculator": "never",  # namespaced: it clashes with the app's calculator
        "weird_name_": "never",  # made to fit
        "a_x_y": "ask", "a_x_y_2": "ask",  # two names that fit alike: which is which is open, the stricter holds
        "free": "auto",  # server a's own "free": b's setting for its tool named "free" is not about it
        "free_2": "auto",  # b's own tool named free_2, not a renamed "free"
    }


# ----- the loop: "ask" pauses, the user decides ----------------------------------------------------------------------

class Ledger:
    """A tool with an effect a test can see."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def record(self, entry: str, times: int = 1) -> str:
        """Write an entry in the ledger.

        Args:
            entry: The text to write.
            times: How many times to write it.
        """
        self.entries += [entry] * times
        return f"recorded {entry!r} x{times}"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def settings(ledger: Ledger, overrides: dict[str, RunPolicy] | None = None, max_rounds: int = 4) -> ToolSettings:
    """The calculator (auto by its hints) and the ledger (an app tool that changes the open world: ask), with the
    policies resolved as a page would."""
    registry = load_tools().subset(["calculator"])
    registry.register(ledger.record, hints=ToolHints(read_only=False, destructive=False, open_world=True))
    return ToolSettings(registry, max_rounds=max_rounds,
                        policies={tool.name: policy_for(tool, overrides or {}) for tool in registry})


def record(entry: str, id: str = "c1", **more: Any) -> ToolCall:
    return ToolCall("record", {"entry": entry, **more}, id=id)


def paused(ledger: Ledger, *script, tools: ToolSettings | None = None) -> tuple[ScriptedClient, Conversation, list]:
    """A turn whose first answer calls the ledger: it pauses."""
    client = ScriptedClient(script)
    conversation = Conversation([Message("user", "Note that I called.")])
    events = list(run_turn(client, conversation, PARAMS, tools=tools or settings(ledger)))
    return client, conversation, events


def test_an_ask_call_pauses_the_turn_with_nothing_run(ledger):
    client, conversation, events = paused(ledger, call_reply(record("called"), text="I'll note it."),
                                          text_reply("Noted."))
    assert kinds(events)[-3:] == ["AnswerDone", "ApprovalNeeded", "TurnDone"]
    answer = conversation.messages[-1]
    assert events[-2].calls == answer.tool_calls == [record("called")] and events[-1].message is answer
    assert ledger.entries == [] and [m.role for m in conversation.messages] == ["user", "assistant"]
    assert pending_calls(conversation) == answer.tool_calls and pending_calls(conversation)[0] is answer.tool_calls[0]
    assert len(client.requests) == 1 and client.replies_left == 1  # the model was not asked again


def resume(client: ScriptedClient, conversation: Conversation, tools: ToolSettings, cancel=None,
           **decisions: Decision) -> list:
    return list(resume_turn(client, conversation, PARAMS, "", cancel, tools, None, decisions))


def test_run_lets_the_call_run_once_and_the_model_goes_on(ledger):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("called")), text_reply("Noted."), tools=tools)
    events = resume(client, conversation, tools, c1=Decision("run"))
    assert kinds(events) == ["ToolCallStarted", "ToolCallFinished", "TextDelta", "AnswerDone", "TurnDone"]
    assert ledger.entries == ["called"]
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    result = conversation.messages[2]
    assert (result.tool_call_id, result.tool_status, result.content) == ("c1", "ok", "recorded 'called' x1")
    assert client.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "c1", "name": "record",
                                               "content": "recorded 'called' x1"}
    assert events[-1].message is conversation.messages[-1] and conversation.messages[-1].content == "Noted."
    assert pending_calls(conversation) == []
    with pytest.raises(ValueError, match="no tool calls are waiting"):
        resume_turn(client, conversation, PARAMS, "", None, tools, None, {"c1": Decision("run")})
    assert ledger.entries == ["called"]


def test_deny_tells_the_model_why_and_it_goes_on(ledger):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("called")), text_reply("Fine, I won't."), tools=tools)
    events = resume(client, conversation, tools, c1=Decision("deny", reason="  not in my ledger  "))
    assert kinds(events) == ["ToolCallStarted", "ToolCallFinished", "TextDelta", "AnswerDone", "TurnDone"]
    finished = events[1]
    denied = conversation.messages[2]
    assert finished.message is denied and not finished.result.ok
    assert (denied.role, denied.tool_call_id, denied.tool_status) == ("tool", "c1", "denied")
    assert denied.content == "The user declined to run this call: not in my ledger" == finished.result.content
    assert client.requests[1].messages[-1]["content"] == denied.content  # the model reads why
    assert ledger.entries == [] and conversation.messages[-1].content == "Fine, I won't."


def test_deny_without_a_reason_says_just_that(ledger):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("called")), text_reply("OK."), tools=tools)
    resume(client, conversation, tools, c1=Decision("deny"))
    assert conversation.messages[2].content == DECLINED == "The user declined to run this call."


def test_an_edited_call_runs_as_edited_and_keeps_what_the_model_wrote(ledger):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("caled", times=3)), text_reply("Noted."), tools=tools)
    edited = {"entry": "called", "times": 1}
    resume(client, conversation, tools, c1=Decision("run", arguments=edited))
    call = conversation.messages[1].tool_calls[0]
    assert ledger.entries == ["called"]
    assert (call.arguments, call.edited_from) == (edited, {"entry": "caled", "times": 3})
    assert call.arguments is not edited  # the UI's dict stays the UI's
    # The model reads the call that ran, not the one it wrote.
    assert json.loads(client.requests[1].messages[1]["tool_calls"][0]["function"]["arguments"]) == edited


def test_invalid_edited_arguments_are_refused_before_anything_happens(ledger):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("called")), text_reply("Noted."), tools=tools)
    before = [encode_message_json(message) for message in conversation.messages]
    refusals = {
        "Error: invalid arguments for record: times: 'three' is not of type 'integer'.":
            {"c1": Decision("run", arguments={"entry": "called", "times": "three"})},
        "Error: invalid arguments for record: 'entry' is a required property.":
            {"c1": Decision("run", arguments={})},
        "the call to record (c1) needs a decision: run or deny": {},
        "no waiting tool call has the id 'c2'": {"c1": Decision("run"), "c2": Decision("run")},
    }
    for message, decisions in refusals.items():
        with pytest.raises(ValueError) as refused:
            resume_turn(client, conversation, PARAMS, "", None, tools, None, decisions)  # raises at once
        assert str(refused.value) == message
    assert [encode_message_json(message) for message in conversation.messages] == before
    assert ledger.entries == [] and len(client.requests) == 1 and pending_calls(conversation) == [record("called")]
    with pytest.raises(ValueError, match="a decision is 'run' or 'deny'"):
        Decision("maybe")  # type: ignore[arg-type]
    # The card stays: a valid decision still goes through.
    resume(client, conversation, tools, c1=Decision("run", arguments={"entry": "called", "times": 2}))
    assert ledger.entries == ["called", "called"]


def test_a_mixed_answer_waits_whole_then_runs_in_order(ledger):
    tools = settings(ledger)
    sum_call = ToolCall("calculator", {"expression": "2 + 2"}, id="c0")
    client, conversation, events = paused(ledger, call_reply(sum_call, record("sum asked", id="c1")),
                                          text_reply("4, noted."), tools=tools)
    asked = next(event for event in events if isinstance(event, ApprovalNeeded))
    assert [call.id for call in asked.calls] == ["c1"]  # only the ledger needs asking...
    assert [call.id for call in pending_calls(conversation)] == ["c0", "c1"]  # ...but the calculator waits too
    assert not any(isinstance(event, ToolCallStarted) for event in events)
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    events = resume(client, conversation, tools, c1=Decision("run"))  # the auto call needs no decision
    assert [(m.tool_call_id, m.tool_status) for m in conversation.messages[2:4]] == [("c0", "ok"), ("c1", "ok")]
    assert [e.call.id for e in events if isinstance(e, ToolCallFinished)] == ["c0", "c1"]
    assert ledger.entries == ["sum asked"] and conversation.messages[-1].content == "4, noted."


def test_a_never_tool_is_not_offered_and_cannot_run_even_when_called(ledger):
    tools = settings(ledger, overrides={"record": "never"})
    client = ScriptedClient([call_reply(record("sneaky")), text_reply("It is not there.")])
    conversation = Conversation([Message("user", "Note it.")])
    events = list(run_turn(client, conversation, PARAMS, tools=tools))
    assert client.requests[0].offered_tools == ["calculator"]
    assert [tool["function"]["name"] for tool in client.requests[0].tools.tools] == ["calculator"]
    assert not any(isinstance(event, ApprovalNeeded) for event in events)
    result = conversation.messages[2]  # a model that names it anyway (copied from earlier) reads that it is not there
    assert result.tool_status == "failed" and result.content.startswith("Error: there is no tool named 'record'")
    assert ledger.entries == []
    # Forcing it cannot beat "never"; with nothing left to offer, nothing is.
    forced = ToolSettings(tools.registry, choice="record", policies=tools.policies)
    assert forced.request(0).choice == "auto" and forced.request(0).names == ["calculator"]
    nothing = ToolSettings(tools.registry, policies={"record": "never", "calculator": "never"})
    client = ScriptedClient([text_reply("Just words.")])
    list(run_turn(client, Conversation([Message("user", "hi")]), PARAMS, tools=nothing))
    assert client.requests[0].tools is None


def test_without_policies_every_tool_runs_as_before(ledger):
    registry = settings(ledger).registry
    client = ScriptedClient([call_reply(record("called")), text_reply("Noted.")])
    conversation = Conversation([Message("user", "Note it.")])
    events = list(run_turn(client, conversation, PARAMS, tools=ToolSettings(registry)))
    assert kinds(events) == ["ToolCallWriting", "ToolCallWriting", "AnswerDone", "ToolCallStarted", "ToolCallFinished",
                             "TextDelta", "AnswerDone", "TurnDone"]
    assert ledger.entries == ["called"] and client.requests[0].offered_tools == ["calculator", "record"]


def test_the_round_limit_holds_across_the_pause_and_the_model_may_ask_again(ledger):
    tools = settings(ledger, max_rounds=3)
    client, conversation, _ = paused(ledger, call_reply(record("one")), call_reply(record("two", id="c2")),
                                     text_reply("Both noted."), tools=tools)
    events = resume(client, conversation, tools, c1=Decision("run"))
    assert kinds(events)[-2:] == ["ApprovalNeeded", "TurnDone"] and events[-2].calls == [record("two", id="c2")]
    assert ledger.entries == ["one"] and client.requests[1].tool_choice == "auto"
    events = resume(client, conversation, tools, c2=Decision("run"))
    assert ledger.entries == ["one", "two"]
    assert client.requests[2].tool_choice == "none"  # the third generation of the turn is its last: words only
    assert isinstance(events[-1], TurnDone) and events[-1].message.content == "Both noted."
    # With the last round spent on the call itself, the turn ends after it runs.
    tools = settings(ledger, max_rounds=2)
    client, conversation, _ = paused(ledger, call_reply(record("last")), text_reply("Noted."), tools=tools)
    events = resume(client, conversation, tools, c1=Decision("run"))
    assert client.requests[1].tool_choice == "none"
    assert kinds(events) == ["ToolCallStarted", "ToolCallFinished", "TextDelta", "AnswerDone", "TurnDone"]


def test_stop_during_a_resumed_call_stops_it_as_in_any_turn():
    release = threading.Event()
    registry = ToolRegistry()

    def wait_for_it(what: str) -> str:
        """Wait for something.

        Args:
            what: What to wait for.
        """
        release.wait(30)
        return "came"

    registry.register(wait_for_it, timeout_s=60)  # unannotated: asks
    tools = ToolSettings(registry, policies={tool.name: policy_for(tool, {}) for tool in registry})
    client = ScriptedClient([call_reply(ToolCall("wait_for_it", {"what": "Godot"}, id="w1")), text_reply("Unused.")])
    conversation = Conversation([Message("user", "Wait.")])
    assert kinds(run_turn(client, conversation, PARAMS, tools=tools))[-2:] == ["ApprovalNeeded", "TurnDone"]
    cancel = threading.Event()
    events = []
    try:
        for event in resume_turn(client, conversation, PARAMS, "", cancel, tools, None, {"w1": Decision("run")}):
            events.append(event)
            if isinstance(event, ToolCallStarted):
                cancel.set()
    finally:
        release.set()
    assert conversation.messages[-1].tool_status == "stopped" and isinstance(events[-1], TurnDone)
    assert len(client.requests) == 1 and pending_calls(conversation) == []  # stopped: nothing waits any more


def test_what_waits_and_what_does_not():
    call, other = ToolCall("f", {}, id="a"), ToolCall("g", {}, id="b")
    asked = Message("assistant", "", tool_calls=[call, other])
    assert pending_calls(Conversation([Message("user", "hi"), asked])) == [call, other]
    answered = Message("tool", "1", tool_call_id="a", tool_status="ok")
    assert pending_calls(Conversation([Message("user", "hi"), asked, answered])) == [other]
    stopped = Message("tool", "x", tool_call_id="a", tool_status="stopped")
    assert pending_calls(Conversation([Message("user", "hi"), asked, stopped])) == []
    assert pending_calls(Conversation([Message("user", "hi"), asked, Message("user", "never mind")])) == []
    failed = Message("assistant", "", tool_calls=[call], error="connection lost")
    assert pending_calls(Conversation([Message("user", "hi"), failed])) == []
    assert pending_calls(Conversation([Message("user", "hi"), Message("assistant", "hello")])) == []
    assert pending_calls(Conversation()) == []


# ----- the pause is the conversation: stored, restarted, exported -----------------------------------------------------

@pytest.fixture
def store(tmp_path) -> Iterator[ConversationStore]:
    engine = open_database(f"sqlite:///{tmp_path / 'conversations.db'}")
    yield ConversationStore(engine)
    engine.dispose()


def test_a_paused_turn_survives_the_store_and_resumes_from_what_was_loaded(ledger, store):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("called")), text_reply("Noted."), tools=tools)
    saved = store.create("alice", "tools")
    for message in conversation.messages:
        store.append("alice", saved, message)
    loaded = Conversation(store.get("alice", saved).messages)  # as after a restart: nothing but the store
    assert loaded.messages == conversation.messages and loaded.messages[-1] is not conversation.messages[-1]
    assert pending_calls(loaded) == [record("called")]
    resume(client, loaded, tools, c1=Decision("run"))
    assert ledger.entries == ["called"] and [m.role for m in loaded.messages] == ["user", "assistant", "tool",
                                                                                  "assistant"]


def test_edited_and_denied_calls_survive_the_store_and_export_and_import(ledger, store):
    tools = settings(ledger)
    client, conversation, _ = paused(ledger, call_reply(record("caled"), record("twice", id="c2")),
                                     text_reply("Noted once."), tools=tools)
    resume(client, conversation, tools, c1=Decision("run", arguments={"entry": "called"}),
           c2=Decision("deny", reason="once is enough"))
    assert conversation.messages[1].tool_calls[0].edited_from == {"entry": "caled"}
    assert conversation.messages[3].tool_status == "denied"
    for message in conversation.messages:
        assert decode_message_json(encode_message_json(message)) == message
    saved = store.create("alice", "tools", title="Ledger")
    for message in conversation.messages:
        store.append("alice", saved, message)
    exported = store.export_json("alice", saved)
    assert exported["version"] == 2
    assert exported["metadata"][1]["tool_calls"][0]["edited_from"] == {"entry": "caled"}
    assert "edited_from" not in exported["metadata"][1]["tool_calls"][1]  # left out where nothing was edited
    copy = store.get("bob", store.import_json("bob", json.dumps(exported).encode()))
    assert copy.messages == conversation.messages
    assert "Edited by the user before it ran; the model wrote:" in store.export_markdown("alice", saved)


def test_an_export_from_before_edits_and_denials_still_imports(store):
    older = {"format": "composite-demo-conversation", "version": 2, "page": "tools",
             "messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "", "tool_calls": [
                              {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
             "metadata": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "tool_calls": [{"id": "c1", "name": "f"}]},
                          {"role": "tool", "content": "ok", "tool_call_id": "c1", "tool_status": "ok"}]}
    copy = store.get("alice", store.import_json("alice", json.dumps(older).encode()))
    assert copy.messages[1].tool_calls == [ToolCall("f", {}, id="c1")] and copy.messages[1].tool_calls[0].edited_from \
        is None


@pytest.mark.parametrize("admin", [ServerPolicies("never"), ServerPolicies("ask", {"lookup": "never"})])
@pytest.mark.parametrize("chosen", ["auto", "ask"])
def test_the_administrators_never_wins_over_any_choice(admin, chosen):
    """A conversation (the user's, or one imported from a file) cannot bring back a tool mcp.json switched off."""
    reader = _tool(ToolHints(read_only=True, open_world=False))
    assert policy_for(reader, {"lookup": chosen}, PolicyDefaults({"docs": admin})) == "never"


def test_an_import_keeps_only_the_policies_that_tighten():
    kept, not_granted = imported_policies({"count_words": "auto", "calculator": "ask", "python": "never",
                                           "open_url": "auto"})
    assert kept == {"calculator": "ask", "python": "never"}
    assert not_granted == ["count_words", "open_url"]
