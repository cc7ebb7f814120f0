"""run_turn: the answer always lands in the conversation, whatever happens to the turn.

A scripted client (tests/fake_client.py) plays the model where the loop's logic is under test; one test keeps a real
(tiny) model, to show that leaving a turn really stops a real engine. The tool loop is in
tests/engines/test_tool_calling.py.
"""

from __future__ import annotations

import inspect
import threading
from contextlib import closing

from app.agent.loop import AnswerDone, Notice, TextDelta, ThinkingDelta, TurnDone, TurnError, Waiting, run_turn
from app.clients.client_protocol import Client, ClientError, Delta, GenerationParams, ModelActivity
from app.domain.conversation import Conversation, Message
from tests.fake_client import ScriptedClient, text_reply, thinking

PARAMS = GenerationParams(temperature=0.0, max_new_tokens=16)


def kinds(events) -> list[str]:
    return [type(event).__name__ for event in events]


def test_the_scripted_client_has_every_member_of_the_client_protocol():
    members = set(Client.__annotations__) | {name for name in vars(Client) if not name.startswith("_")}
    assert members == {"backend", "capabilities", "generation_defaults", "describe", "stream", "complete",
                       "activity", "close"}
    client = ScriptedClient()
    for name in members:
        assert hasattr(client, name), name
        if callable(getattr(Client, name, None)):
            assert inspect.signature(getattr(ScriptedClient, name)).parameters.keys() == \
                inspect.signature(getattr(Client, name)).parameters.keys(), name
    assert client.backend == "scripted" and "scripted-model" in client.describe()
    assert client.generation_defaults.params(max_new_tokens=8) == GenerationParams(max_new_tokens=8)
    assert client.activity() == ModelActivity(generating=0, waiting=0, at_once=1)
    assert ScriptedClient(remote=True).activity() is None


def test_a_turn_appends_the_streamed_answer_with_metrics():
    client = ScriptedClient([text_reply("Hello", " there", "! ")])
    conversation = Conversation([Message("user", "Hello there")])
    events = list(run_turn(client, conversation, PARAMS, "Be brief."))
    assert kinds(events) == ["TextDelta", "TextDelta", "TextDelta", "AnswerDone", "TurnDone"]
    done = events[-1]
    assert conversation.messages[-1] is done.message is events[-2].message
    assert done.message.content == "Hello there!"  # the streamed text, stripped
    # what the client was asked: the system prompt, then the conversation; these params; no tools
    [request] = client.requests
    assert request.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    assert request.params is PARAMS and request.tools is None and request.response_format is None
    # the answer keeps the reply's live metrics object
    assert done.message.metrics is request.metrics
    assert done.message.metrics.completion_tokens == 3 and done.message.metrics.finish_reason == "stop"


def test_a_stream_is_read_while_it_runs_not_after():
    client = ScriptedClient([text_reply("one", " two")])
    events = run_turn(client, Conversation([Message("user", "count")]), PARAMS)
    assert isinstance(next(events), TextDelta)
    assert client.activity() == ModelActivity(generating=1, waiting=0, at_once=1)  # the reply is still open
    assert len(client.requests[0].delivered) == 1
    list(events)
    assert client.activity().generating == 0 and client.replies_left == 0


def test_leaving_mid_stream_closes_the_clients_stream_and_keeps_the_partial_answer():
    client = ScriptedClient([text_reply(*(f" word{i}" for i in range(10))), text_reply("Again.")])
    conversation = Conversation([Message("user", "Hello there")])
    cancel = threading.Event()
    with closing(run_turn(client, conversation, PARAMS, cancel=cancel)) as events:
        received = [next(e for e in events if isinstance(e, TextDelta)) for _ in range(3)]
    request = client.requests[0]
    assert request.closed_early and len(request.delivered) == 3 and cancel.is_set()
    answer = conversation.messages[-1]
    assert answer.role == "assistant" and answer.stopped and answer.metrics is request.metrics
    assert answer.content == "word0 word1 word2" == "".join(e.text for e in received).strip()
    # The conversation goes on, and the model reads the partial answer.
    conversation.add(Message("user", "again"))
    assert isinstance(list(run_turn(client, conversation, PARAMS))[-1], TurnDone)
    assert client.requests[1].messages[1] == {"role": "assistant", "content": "word0 word1 word2"}


def test_stop_ends_the_reply_as_cancelled():
    client = ScriptedClient([text_reply("Once", " upon", " a", " time")])
    conversation = Conversation([Message("user", "A story")])
    cancel = threading.Event()
    events = []
    for event in run_turn(client, conversation, PARAMS, cancel=cancel):
        events.append(event)
        if isinstance(event, TextDelta):
            cancel.set()  # the user presses Stop after the first words
    assert kinds(events) == ["TextDelta", "AnswerDone", "TurnDone"]
    request = client.requests[0]
    assert not request.closed_early and request.delivered[-1].finish_reason == "cancelled"
    assert conversation.messages[-1].stopped and conversation.messages[-1].content == "Once"


def test_leaving_a_turn_stops_a_real_engine(tiny_client):
    """What the scripted client cannot show: a real engine stops generating when the turn is left."""
    conversation = Conversation([Message("user", "Hello there")])
    cancel = threading.Event()
    params = GenerationParams(temperature=0.0, max_new_tokens=400)
    with closing(run_turn(tiny_client, conversation, params, cancel=cancel)) as events:
        received = [next(e for e in events if isinstance(e, TextDelta)) for _ in range(3)]
    answer = conversation.messages[-1]
    assert answer.role == "assistant" and answer.stopped
    assert answer.content == "".join(e.text for e in received).strip()
    assert 0 < answer.metrics.completion_tokens < 400
    assert cancel.is_set()
    # The conversation goes on normally afterwards.
    conversation.add(Message("user", "again"))
    assert isinstance(list(run_turn(tiny_client, conversation, PARAMS))[-1], TurnDone)


def test_a_backend_error_ends_the_turn_once_and_keeps_the_conversation():
    client = ScriptedClient([ClientError("server unreachable"), text_reply("Back again.")])
    conversation = Conversation([Message("user", "hi")])
    events = list(run_turn(client, conversation, PARAMS))
    assert [type(e) for e in events] == [TurnError, AnswerDone, TurnDone]
    assert events[0].message == "server unreachable"
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    failed = conversation.messages[-1]
    assert failed.error == "server unreachable" and failed.metrics.finish_reason == "error"
    # The next turn works, and the failed answer is not fed back to the model.
    conversation.add(Message("user", "hi again"))
    assert kinds(run_turn(client, conversation, PARAMS)) == ["TextDelta", "AnswerDone", "TurnDone"]
    assert client.requests[1].messages == [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi again"}]


def test_an_error_mid_stream_keeps_the_text_so_far():
    client = ScriptedClient([[Delta(text="The answer"), Delta(text=" is"), ClientError("connection lost")]])
    conversation = Conversation([Message("user", "What is it?")])
    events = list(run_turn(client, conversation, PARAMS))
    assert kinds(events) == ["TextDelta", "TextDelta", "TurnError", "AnswerDone", "TurnDone"]
    answer = conversation.messages[-1]
    assert answer.content == "The answer is" and answer.error == "connection lost"
    assert answer.metrics.finish_reason == "error" and answer.metrics.completion_tokens == 2


def test_an_unexpected_exception_is_reported_not_raised():
    client = ScriptedClient([ZeroDivisionError("boom")])
    conversation = Conversation([Message("user", "hi")])
    events = list(run_turn(client, conversation, PARAMS))
    assert [type(e) for e in events] == [TurnError, AnswerDone, TurnDone]
    assert events[0].message == "Unexpected error in the backend: ZeroDivisionError: boom"
    assert conversation.messages[-1].error == events[0].message


def test_a_thought_streams_apart_is_kept_and_never_sent_back():
    client = ScriptedClient([[*thinking("Six sevens", " make 42."), *text_reply("It is ", "42.")],
                             text_reply("You're welcome.")])
    conversation = Conversation([Message("user", "6 * 7?")])
    events = list(run_turn(client, conversation, PARAMS))
    assert kinds(events) == ["ThinkingDelta", "ThinkingDelta", "TextDelta", "TextDelta", "AnswerDone", "TurnDone"]
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Six sevens make 42."
    answer = conversation.messages[-1]
    assert (answer.thinking, answer.content) == ("Six sevens make 42.", "It is 42.")
    assert answer.metrics.thinking_tokens == 2 and answer.metrics.completion_tokens == 4
    conversation.add(Message("user", "Thanks"))
    list(run_turn(client, conversation, PARAMS))
    assert client.requests[1].messages[1] == {"role": "assistant", "content": "It is 42."}  # no thought in it


def test_notices_and_heartbeats_reach_the_consumer():
    client = ScriptedClient([[Delta(notice="Waiting for another session's answer."), Delta(), Delta(),
                              *text_reply("Hi.")]])
    events = list(run_turn(client, Conversation([Message("user", "hi")]), PARAMS))
    assert kinds(events) == ["Notice", "Waiting", "Waiting", "TextDelta", "AnswerDone", "TurnDone"]
    assert isinstance(events[0], Notice) and events[0].text == "Waiting for another session's answer."
    assert all(isinstance(e, Waiting) for e in events[1:3])
