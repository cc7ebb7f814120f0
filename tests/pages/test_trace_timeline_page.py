"""An answer's own trace in the app (AppTest, tiny random model): after a turn, the Trace popover under the answer
draws the turn and its model call as a timeline, from the spans the app keeps in memory, with no collector."""

from __future__ import annotations

from app.domain.conversation import Conversation, Message
from tests.helpers import open_app


def test_an_answer_shows_its_turns_spans_as_a_timeline(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as at:
        at.chat_input(key="chat_input").set_value("Hello there").run()
        assert not at.exception
        answer = at.session_state["conversation/chat"].messages[-1]
        assert len(answer.trace_id) == 32
        steps = [table.value for table in at.dataframe]
        (table,) = steps
        assert list(table["step"]) == ["1. invoke_agent composite-demo", f"2. · chat {answer.model}"]
        assert list(table["status"]) == ["ok", "ok"] and table["tokens out"][0] == ""  # the turn counts none itself
        assert int(table["tokens out"][1]) == 6 and int(table["tokens in"][1]) > 0 and table["from cache"][1] == "0"
        assert len(at.get("vega_lite_chart")) == 1  # the timeline itself


def test_an_answer_whose_trace_is_gone_says_so(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir) as at:
        at.session_state["conversation/chat"] = Conversation([
            Message("user", "Hi"), Message("assistant", "Hello", trace_id="0" * 31 + "1")])
        at.run()
        assert any("no longer in memory" in caption.value for caption in at.caption)
