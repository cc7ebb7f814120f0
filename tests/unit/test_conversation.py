import io
import json
import types
import typing

import pytest
from PIL import Image

from app.domain.chat_messages import ChatMessage
from app.domain.conversation import AnswerMetrics, Attachment, Conversation, Message, ToolCall


def test_openai_round_trip_keeps_every_role_and_tool_call():
    source = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
            ],
        },
        {"role": "tool", "content": "21 °C, sunny", "tool_call_id": "call_1", "name": "get_weather"},
        {"role": "assistant", "content": "It is 21 °C and sunny."},
    ]
    conversation = Conversation.from_openai(source)
    assert conversation.messages[2].tool_calls[0].arguments == {"city": "Paris"}
    assert conversation.to_openai() == source


def test_text_content_parts_are_joined_and_unusable_parts_refused():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    message = Message.from_openai({"role": "user", "content": parts})
    assert message.content == "ab"
    with pytest.raises(ValueError, match="must be a data: URL"):
        Message.from_openai({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
    with pytest.raises(ValueError, match="'file' is not supported"):
        Message.from_openai({"role": "user", "content": [{"type": "file", "file": {}}]})


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"role": "wizard", "content": "x"}, "unknown role"),
        ({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}, "function.name"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}, "not valid JSON"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}, "JSON object"),
        # over json_limits' bounds: nesting that overflowed the decoder's recursion, an integer past int()'s limit
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[" * 100_000}}]},
         "tool call 'f': arguments are too big to decode \\(nested deeper than"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"n": ' + "1" * 5000 + "}"}}]},
         "too big to decode \\(a number has too many digits"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]},
         "JSON object or a string"),
        ({"role": "user", "content": 42}, "content must be"),
        ("just a string", "JSON object"),
    ],
)
def test_bad_messages_raise_clear_errors(bad, error):
    with pytest.raises(ValueError, match=error):
        Message.from_openai(bad)


def test_rewind_to_last_user_drops_answers_and_can_edit():
    conversation = Conversation(
        [Message("user", "one"), Message("assistant", "1"), Message("user", "two"), Message("assistant", "2")]
    )
    assert conversation.rewind_to_last_user("two, edited").content == "two, edited"
    assert [m.content for m in conversation.messages] == ["one", "1", "two, edited"]
    assert Conversation().rewind_to_last_user() is None


def test_metrics_summary_names_stops_and_cuts():
    metrics = AnswerMetrics(prompt_tokens=10, completion_tokens=5, time_to_first_token_s=0.2, tokens_per_second=12.5,
                            finish_reason="cancelled")
    assert metrics.summary() == "5 tokens · TTFT 0.20 s · 12.5 tok/s · prompt 10 tokens"
    assert "cut at max new tokens" in AnswerMetrics(finish_reason="length").summary()
    assert "2 oldest messages left out" in AnswerMetrics(dropped_messages=2).summary()
    assert Message("assistant", metrics=metrics).stopped


def test_tool_call_ids_are_unique():
    assert ToolCall("f", {}).id != ToolCall("f", {}).id


@pytest.mark.parametrize("tool_calls", [True, -1, "x", [[[]]], [1], [{"function": "x"}]])
def test_tool_calls_of_the_wrong_shape_are_a_clear_value_error(tool_calls):
    with pytest.raises(ValueError, match="tool_calls must be a list|a tool call must be an object"):
        Conversation.from_openai([{"role": "assistant", "content": None, "tool_calls": tool_calls}])


def test_ids_and_names_must_be_strings():
    with pytest.raises(ValueError, match="tool_call_id must be a string"):
        Conversation.from_openai([{"role": "tool", "content": "4", "tool_call_id": 5}])


def test_versions_keep_what_an_edit_or_a_regeneration_replaces_and_the_model_sees_the_branch_on_screen():
    conversation = Conversation()
    conversation.add(Message("user", "q1"))
    conversation.add(Message("assistant", "a1"))
    conversation.new_version(1)  # regenerate the answer
    conversation.add(Message("assistant", "a1 again"))
    conversation.add(Message("user", "q2"))
    conversation.add(Message("assistant", "a2"))
    assert conversation.version_count(1) == (2, 2)
    conversation.new_version(0)  # edit the first question: everything after it becomes a version
    conversation.add(Message("user", "q1 edited"))
    assert [m.content for m in conversation.messages] == ["q1 edited"]
    assert conversation.version_count(0) == (2, 2)
    assert [m["content"] for m in conversation.to_openai()] == ["q1 edited"]
    conversation.switch_version(0, 1)  # the whole earlier branch comes back, its own versions with it
    assert [m.content for m in conversation.messages] == ["q1", "a1 again", "q2", "a2"]
    assert conversation.version_count(1) == (2, 2)
    conversation.switch_version(1, 1)
    assert [m.content for m in conversation.messages] == ["q1", "a1"]
    conversation.switch_version(0, 2)
    assert [m.content for m in conversation.messages] == ["q1 edited"]
    with pytest.raises(IndexError):
        conversation.switch_version(0, 3)


def test_a_version_started_twice_before_an_answer_keeps_both_earlier_ones():
    conversation = Conversation([Message("user", "q"), Message("assistant", "first")])
    conversation.new_version(1)
    conversation.new_version(1)  # Regenerate pressed again before anything was written
    conversation.add(Message("assistant", "second"))
    assert conversation.version_count(1) == (2, 2)
    conversation.switch_version(1, 1)
    assert conversation.messages[1].content == "first"


def _conforms(value, hint) -> bool:
    """`value` has the shape `hint` (a chat_messages TypedDict, a union, a list or a literal) states."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        return (isinstance(value, dict) and hint.__required_keys__ <= value.keys() <= hints.keys()
                and all(_conforms(value[key], hints[key]) for key in value))
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if origin is list:
        return isinstance(value, list) and all(_conforms(item, args[0]) for item in value)
    return value is None if hint is type(None) else isinstance(value, hint)


def test_to_openai_writes_the_chat_message_types_it_declares():
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 128, 128)).save(buffer, "PNG")
    picture = Attachment(kind="image", name="a.png", data=buffer.getvalue())
    call = ToolCall(name="get_weather", arguments={"city": "Paris"})
    conversation = Conversation(messages=[
        Message(role="system", content="Be brief."),
        Message(role="user", content="What is this?", attachments=[picture]),
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content="21 °C", tool_call_id=call.id, name="get_weather"),
        Message(role="assistant", content="Sunny.", thinking="It said 21."),
    ])
    written = conversation.to_openai()
    assert [message["role"] for message in written] == ["system", "user", "assistant", "tool", "assistant"]
    assert all(_conforms(message, ChatMessage) for message in written)
    assert isinstance(written[1]["content"], list) and written[2]["tool_calls"]
    # The checker itself tells a wrong shape apart.
    assert not _conforms({"role": "user", "content": [{"type": "image_url", "image_url": "data:,"}]}, ChatMessage)
    assert not _conforms({"role": "user", "metadata": ""}, ChatMessage)
    assert not _conforms({"content": "no role"}, ChatMessage)
