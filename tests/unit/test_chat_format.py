import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.conversation import AnswerMetrics, CallFragment, Conversation, Message
from app.prompting.chat_format import PromptTooLong, ResponseProcessor, fit_to_context, process_input, process_response
from app.prompting.dialects import DIALECTS

HERMES = DIALECTS["hermes"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_process_input_prepends_system_prompt_and_skips_failed_or_empty_answers():
    conversation = Conversation(
        [
            Message("user", "hi"),
            Message("assistant", "", error="backend down"),
            Message("assistant", "", metrics=AnswerMetrics(finish_reason="cancelled")),
            Message("user", "hi again"),
            Message("assistant", "partial", metrics=AnswerMetrics(finish_reason="cancelled")),
        ]
    )
    assert process_input(conversation, "  Be kind. ") == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "hi again"},
        {"role": "assistant", "content": "partial"},
    ]
    assert process_input(conversation, "   ")[0] == {"role": "user", "content": "hi"}


def _run(processor, chunks, native=()):
    """Feed `chunks` (with native call fragments on the first) and return shown text, fragments and the parse."""
    shown, fragments = [], []
    for index, chunk in enumerate(chunks):
        piece = processor.feed(chunk, native if index == 0 else ())
        shown.append(piece.text)
        fragments += piece.call_fragments
    tail, parsed, notice = processor.finish()
    return "".join(shown) + tail.text, fragments + tail.call_fragments, parsed, notice


def _arguments(fragments, index=0):
    return "".join(f.arguments for f in fragments if f.index == index)


def test_without_tools_the_whole_reply_is_text_even_if_it_looks_like_a_call():
    text, fragments, parsed, _ = _run(process_response(HERMES, []), ["  hi <tool_", "call>{}</tool_call> "])
    assert text == "  hi <tool_call>{}</tool_call> " and fragments == []
    assert parsed.content == "hi <tool_call>{}</tool_call>" and parsed.tool_calls == []


def test_stop_strings_end_the_reply_without_showing_part_of_one():
    processor = process_response(None, [], stop_strings=["STOP"])
    text, _, parsed, _ = _run(processor, ["one ST", "OP two"])
    assert text == "one " and parsed.content == "one" and processor.stopped


def test_a_dialect_call_streams_whole_once_complete_with_the_text_around_it():
    reply = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    processor = process_response(HERMES, [WEATHER])
    first = processor.feed(reply[:40])
    assert first.text == "Let me check. " and first.call_fragments == []  # the call is not complete yet
    text, fragments, parsed, _ = _run(processor, [reply[40:]])
    call = parsed.tool_calls[0]
    assert parsed.content == "Let me check." and (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert fragments[0].name == "get_weather" and fragments[0].id == call.id
    assert json.loads(_arguments(fragments)) == {"city": "Paris"}


@settings(max_examples=60, deadline=None)
@given(city=st.text(max_size=12), cuts=st.lists(st.integers(1, 8), min_size=1, max_size=30))
def test_a_forced_call_streams_its_arguments_as_written_however_the_reply_is_cut(city, cuts):
    forced = [HERMES.constrained_call(WEATHER)]
    reply = forced[0].prefix + json.dumps({"city": city}, separators=(",", ":")) + forced[0].suffix
    chunks, at = [], 0
    for size in cuts * (len(reply) // sum(cuts) + 1):
        chunks.append(reply[at : at + size])
        at += size
    text, fragments, parsed, _ = _run(process_response(HERMES, [WEATHER], forced), chunks)
    assert text == "" and parsed.tool_calls[0].arguments == {"city": city}
    assert fragments[0].name == "get_weather" and all(f.name is None for f in fragments[1:])
    assert json.loads(_arguments(fragments)) == {"city": city}


def test_a_forced_code_call_streams_its_body_as_a_json_string():
    tool = {"type": "function", "function": {"name": "python", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}
    reply = '```python\nprint("a\tb")\n\n```'
    _, fragments, parsed, _ = _run(process_response(HERMES, [tool], [HERMES.constrained_call(tool)]), list(reply))
    assert parsed.tool_calls[0].arguments == {"code": 'print("a\tb")'}
    assert json.loads(_arguments(fragments)) == {"code": 'print("a\tb")'}


def test_a_forced_call_cut_short_is_no_call_but_its_fragments_say_how_far_it_got():
    forced = [HERMES.constrained_call(WEATHER)]
    text, fragments, parsed, _ = _run(process_response(HERMES, [WEATHER], forced), [forced[0].prefix + '{"ci'])
    assert text == "" and parsed.tool_calls == []
    assert fragments[0].name == "get_weather" and _arguments(fragments) == '{"ci'


def test_a_servers_call_deltas_are_put_together_by_index():
    native = [CallFragment(0, id="call_1", name="get_weather"), CallFragment(0, '{"city": '),
              CallFragment(1, id="call_2", name="get_weather"), CallFragment(1, '"Rome"'),
              CallFragment(0, '"Paris"}'), CallFragment(2, id="call_3", name="calculator"), CallFragment(2, "{oops")]
    text, fragments, parsed, notice = _run(ResponseProcessor(native_tools=[WEATHER]), ["Sure."], native)
    assert text == "Sure." and fragments == native
    assert [(c.id, c.arguments) for c in parsed.tool_calls] == [("call_1", {"city": "Paris"}),
                                                                  ("call_2", {"city": "Rome"})]  # bare value wrapped
    assert notice == "The server sent tool calls that could not be used: calculator (arguments are not valid JSON)."


def _count_words(messages):
    return sum(len(m["content"].split()) for m in messages)


def test_fit_keeps_everything_that_fits():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a b"}]
    fitted = fit_to_context(messages, _count_words, budget=10)
    assert fitted.messages == messages and fitted.dropped_messages == 0 and fitted.token_count == 3


def test_fit_drops_oldest_whole_turns_and_keeps_system():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "one two three"},
        {"role": "assistant", "content": "four five"},
        {"role": "user", "content": "six"},
        {"role": "assistant", "content": "seven"},
        {"role": "user", "content": "eight nine"},
    ]
    fitted = fit_to_context(messages, _count_words, budget=5)
    assert [m["content"] for m in fitted.messages] == ["sys", "six", "seven", "eight nine"]
    assert fitted.dropped_messages == 2
    fitted = fit_to_context(messages, _count_words, budget=3)
    assert [m["content"] for m in fitted.messages] == ["sys", "eight nine"]
    assert fitted.dropped_messages == 4


def test_fit_refuses_when_the_newest_turn_alone_is_too_long():
    messages = [{"role": "user", "content": "a b c d e f"}]
    with pytest.raises(PromptTooLong, match="needs 6 tokens but only 4 fit"):
        fit_to_context(messages, _count_words, budget=4)
