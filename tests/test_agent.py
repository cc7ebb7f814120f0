"""run_turn: the answer always lands in the conversation, whatever happens to the turn."""

from __future__ import annotations

import threading
from contextlib import closing

from app.agent import AnswerDone, TextDelta, TurnDone, TurnError, run_turn
from app.clients.base import Capabilities, ClientError, GenerationParams
from app.conversation import Conversation, Message

PARAMS = GenerationParams(temperature=0.0, max_new_tokens=16)


def test_a_turn_appends_the_streamed_answer_with_metrics(tiny_client):
    conversation = Conversation([Message("user", "Hello there")])
    events = list(run_turn(tiny_client, conversation, PARAMS, "Be brief."))
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    done = events[-1]
    assert isinstance(done, TurnDone)
    assert conversation.messages[-1] is done.message
    assert done.message.content == streamed.strip()
    assert done.message.metrics.completion_tokens == 16 and done.message.metrics.finish_reason == "length"


def test_leaving_mid_stream_keeps_the_partial_answer_marked_stopped(tiny_client):
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


class FailingClient:
    """Stands in for a backend whose server is down (cannot be made to fail on demand otherwise)."""

    backend = "failing"
    capabilities = Capabilities(model_id="failing", native_tools=True, dialect=None, context_window=None)

    def __init__(self, exc):
        self.exc = exc

    def describe(self):
        return "failing"

    def stream(self, messages, params, cancel, tools=None, response_format=None):
        raise self.exc
        yield  # pragma: no cover - makes this a generator

    def close(self):
        pass


def test_a_backend_error_ends_the_turn_once_and_keeps_the_conversation():
    conversation = Conversation([Message("user", "hi")])
    events = list(run_turn(FailingClient(ClientError("server unreachable")), conversation, PARAMS))
    assert [type(e) for e in events] == [TurnError, AnswerDone, TurnDone]
    assert events[0].message == "server unreachable"
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    assert conversation.messages[-1].error == "server unreachable"


def test_an_unexpected_exception_is_reported_not_raised():
    conversation = Conversation([Message("user", "hi")])
    events = list(run_turn(FailingClient(ZeroDivisionError("boom")), conversation, PARAMS))
    assert isinstance(events[0], TurnError) and "ZeroDivisionError: boom" in events[0].message
