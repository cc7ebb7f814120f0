import pytest

from app.chat_format import PromptTooLong, fit_to_context, process_input, process_response
from app.conversation import AnswerMetrics, Conversation, Message


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


def test_process_response_without_tools_is_the_text():
    parsed = process_response("  The answer.\n")
    assert parsed.content == "The answer." and parsed.tool_calls == []


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
