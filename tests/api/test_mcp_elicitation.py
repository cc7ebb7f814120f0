"""An MCP server's questions to the user during a tool call (elicitation, form mode), through the real SDK: a server
(tests/mcp_servers/asking_server.py) started over stdio by the McpManager, its tools in the registry, the real agent
loop with a scripted model. The question pauses the turn with the call running; the answer goes back to the server,
whose result then ends the call; the user's thinking time does not count against the call's time limit; Stop
cancels; forms the client cannot show are refused."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent.loop import QuestionAsked, ToolCallFinished, ToolSettings, TurnDone, pending_calls, resume_turn, run_turn
from app.clients.client_protocol import GenerationParams
from app.config import McpSettings
from app.domain.conversation import Conversation, Message, ToolCall
from app.mcp_client import McpManager, StdioServer, mcp_registry
from app.mcp_client.elicitation import form_problem
from app.tools.questions import Answer, answer
from tests.fake_client import ScriptedClient, call_reply, text_reply

SERVER = Path(__file__).parent.parent / "mcp_servers" / "asking_server.py"


@pytest.fixture(scope="module")
def manager() -> Iterator[McpManager]:
    mcp = McpManager(McpSettings(connect_timeout_s=60, call_timeout_s=2),  # short: thinking time must not count
                     servers={"asking": StdioServer(command=sys.executable, args=[str(SERVER)])})
    mcp.refresh(mcp.connections())
    yield mcp
    mcp.close()


@pytest.fixture
def tools(manager: McpManager) -> ToolSettings:
    registry = mcp_registry(manager, manager.connections())
    assert {"book_table", "wipe"} <= set(registry.names), manager.connections()[0].status()
    return ToolSettings(registry, policies={"book_table": "auto", "wipe": "auto"})


def start(tools: ToolSettings, call: ToolCall, *replies) -> tuple[ScriptedClient, Conversation, QuestionAsked]:
    """A turn whose model calls `call`: the events up to the server's question, which pauses it."""
    client = ScriptedClient([call_reply(call), *replies])
    conversation = Conversation([Message(role="user", content="Please")])
    events = list(run_turn(client, conversation, GenerationParams(), tools=tools))
    asked = [e for e in events if isinstance(e, QuestionAsked)]
    assert len(asked) == 1 and isinstance(events[-1], TurnDone), [type(e).__name__ for e in events]
    assert pending_calls(conversation) == [call]  # no result yet: it runs, waiting for the user
    return client, conversation, asked[0]


def go_on(client, conversation, tools, asked: QuestionAsked) -> list:
    return list(resume_turn(client, conversation, GenerationParams(), "", None, tools, None, {},
                            running={asked.call.id: asked.running}))


def test_the_question_pauses_the_turn_and_the_answer_reaches_the_server(tools):
    call = ToolCall("book_table", {"restaurant": "Chez Test"}, id="call_1")
    client, conversation, asked = start(tools, call, text_reply("Your table is booked."))
    question = asked.asked.question
    assert question.message == "Booking at Chez Test: how many guests, and when?"
    assert question.source == "MCP server asking"
    fields = question.schema["properties"]
    assert set(fields) == {"guests", "time", "vegetarian", "note"} and set(question.schema["required"]) == {
        "guests", "time"}
    assert form_problem(question.schema) is None

    time.sleep(3)  # longer than the call's 2 s limit: the user's thinking time is not the tool's
    assert answer(asked.asked, Answer("accept", {"guests": 4, "time": "20:00", "vegetarian": True}))
    events = go_on(client, conversation, tools, asked)
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished.message.content == "Booked Chez Test for 4 at 20:00 (vegetarian)."
    assert finished.message.tool_status == "ok"
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    assert conversation.messages[-1].content == "Your table is booked."


def test_a_declined_question_is_the_servers_to_handle(tools):
    call = ToolCall("book_table", {"restaurant": "Chez Test"}, id="call_2")
    client, conversation, asked = start(tools, call, text_reply("Not booked."))
    answer(asked.asked, Answer("decline"))
    (finished,) = [e for e in go_on(client, conversation, tools, asked) if isinstance(e, ToolCallFinished)]
    assert finished.message.content == "No booking at Chez Test: the user chose decline."


def test_a_second_question_pauses_the_turn_again(tools):
    call = ToolCall("wipe", {}, id="call_3")
    client, conversation, asked = start(tools, call, text_reply("Done."))
    answer(asked.asked, Answer("accept", {"sure": True}))
    events = go_on(client, conversation, tools, asked)
    (again,) = [e for e in events if isinstance(e, QuestionAsked)]
    assert again.asked.question.message == "Really wipe everything? This cannot be undone."
    assert again.running is asked.running
    answer(again.asked, Answer("accept", {"sure": True}))
    (finished,) = [e for e in go_on(client, conversation, tools, again) if isinstance(e, ToolCallFinished)]
    assert finished.message.content == "Wiped."


def test_stopping_a_call_that_waits_for_an_answer_cancels_it_and_the_server_hears_so(tools):
    call = ToolCall("book_table", {"restaurant": "Chez Test"}, id="call_4")
    _, _, asked = start(tools, call)
    result = asked.running.cancel()
    assert not result.ok and "stopped" in result.content
    assert asked.asked.answer.result(timeout=5) == Answer("cancel")  # what the server is told


def test_a_question_nobody_answers_in_time_is_cancelled(tools, monkeypatch):
    import app.mcp_client.elicitation as elicitation

    monkeypatch.setattr(elicitation, "QUESTION_TIMEOUT_S", 1.0)
    call = ToolCall("book_table", {"restaurant": "Chez Test"}, id="call_5")
    client, conversation, asked = start(tools, call, text_reply("Maybe later."))
    deadline = time.monotonic() + 10
    while asked.running.wait(0.1) is None:
        assert time.monotonic() < deadline
    (finished,) = [e for e in go_on(client, conversation, tools, asked) if isinstance(e, ToolCallFinished)]
    assert finished.message.content == "No booking at Chez Test: the user chose cancel."


def test_a_question_goes_to_the_one_call_in_flight_and_never_to_a_guess():
    """The SDK does not say which call a question belongs to: with one call in flight it is that call's; with two
    (two users of a shared server) it is refused, never shown to one of them at random."""
    import anyio
    from mcp import types

    from app.mcp_client.elicitation import Askers
    from app.tools.questions import QuestionChannel

    schema = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
    params = types.ElicitRequestFormParams(message="Sure?", requested_schema=schema)

    async def scenario() -> None:
        askers = Askers("MCP server shared")
        alice, bob = QuestionChannel(), QuestionChannel()
        # The SDK's receive loop: a task of its own, started before any call, that hands each question over.
        ask, questions = anyio.create_memory_object_stream[anyio.abc.ObjectStream](0)

        async def receive_loop() -> None:
            async for reply in questions:
                await reply.send(await askers.elicit(None, params))  # type: ignore[arg-type]  (context unread)

        async def question() -> types.ElicitResult | types.ErrorData:
            send, receive = anyio.create_memory_object_stream[types.ElicitResult | types.ErrorData](1)
            await ask.send(send)
            return await receive.receive()

        async with anyio.create_task_group() as group:
            group.start_soon(receive_loop)
            refused = await question()
            assert isinstance(refused, types.ErrorData) and "no tool call of this client is running" in refused.message
            with anyio.CancelScope() as first, askers.calling(alice, first):
                async def answer_alice() -> None:
                    while alice.pending is None:
                        await anyio.sleep(0.01)
                    answer(alice.pending, Answer("accept", {"sure": True}))

                group.start_soon(answer_alice)
                result = await question()
                assert isinstance(result, types.ElicitResult) and result.content == {"sure": True}
                with anyio.CancelScope() as second, askers.calling(bob, second):
                    both = await question()
                    assert isinstance(both, types.ErrorData) and "2 requests are running" in both.message
                    assert bob.pending is None and alice.pending is None
                with anyio.CancelScope() as read, askers.calling(None, read):  # another user's prompt, say
                    other = await question()
                    assert isinstance(other, types.ErrorData) and "2 requests are running" in other.message
                    assert alice.pending is None
            with anyio.CancelScope() as read, askers.calling(None, read):  # alone, and no one watches it
                unwatched = await question()
                assert isinstance(unwatched, types.ErrorData) and "not a tool call a user watches" in unwatched.message
            group.cancel_scope.cancel()

    anyio.run(scenario)


@pytest.mark.parametrize("schema, problem", [
    ({"type": "object", "properties": {"address": {"type": "object"}}}, "of type 'object'"),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}, "free values"),
    ({"type": "object", "properties": {f"f{n}": {"type": "string"} for n in range(50)}}, "50 fields"),
    ({"type": "object", "properties": {}}, "no fields"),
    ({"type": "string"}, "not an object"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}, "not a valid JSON Schema"),
    # What a widget would refuse, which would take the whole conversation's drawing down with it:
    ({"type": "object", "properties": {"c": {"type": "string", "enum": [{"a": 1}, "b"]}}}, "offers no choice"),
    ({"type": "object", "properties": {"c": {"type": "string", "enum": ["a", "a"]}}}, "offers no choice"),
    ({"type": "object", "properties": {"c": {"type": "array", "items": {"enum": ["a"]}, "default": 5}}},
     "not a list of choices"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}}, "minimum above"),
    ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3, "default": 9}}}, "outside its bounds"),
    ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 2**64}}}, "a form cannot hold"),
    ({"type": "object", "properties": {"b": {"type": "boolean", "default": "yes"}}}, "not a boolean"),
])
def test_forms_the_client_cannot_show_are_refused_with_a_reason(schema, problem):
    assert problem in (form_problem(schema) or "")
