"""The welcome's example prompts work as promised: with the embedded SmolLM2, offline, each tool example's forced
call succeeds (the tool answers, not an error; after the user lets it run where the tool asks first), and the page
offers only examples whose tool is on."""

from __future__ import annotations

import pytest

from app.frontends.streamlit import welcome
from app.frontends.streamlit.line_breaks import keep_line_breaks
from tests.helpers import TOOLS_PAGE, open_app


@pytest.fixture(scope="module")
def examples_app(smollm2_dir):
    with pytest.MonkeyPatch.context() as monkeypatch, \
            open_app(monkeypatch, smollm2_dir, page=TOOLS_PAGE, timeout=300, temperature=0.0) as at:
        yield at


@pytest.mark.parametrize("example", [e for e in welcome.EXAMPLES["tools"]], ids=lambda e: e.tool)
def test_each_tools_example_is_answered_by_its_tool(examples_app, example):
    at = examples_app
    at.button(key="history_new").click().run()
    at.button(key=f"example/tools/{example.label}").click().run()
    assert not at.exception
    messages = at.session_state["conversation/tools"].messages
    if at.session_state[f"_run_policy/tools/{example.tool}"] == "ask":  # count_words says nothing: it asks first
        (call,) = messages[-1].tool_calls
        at.button(key=f"approval_run/tools/{call.id}").click().run()
        assert not at.exception
    calls = [call for m in messages for call in m.tool_calls]
    results = [m for m in messages if m.role == "tool"]
    assert [c.name for c in calls][:1] == [example.tool]
    assert results and results[0].tool_status == "ok", results[0].content if results else "no result"


def test_examples_need_their_tool_switched_on(examples_app):
    at = examples_app
    at.button(key="history_new").click().run()
    at.toggle(key="settings.tools.enabled.calculator").set_value(False).run()
    keys = [b.key for b in at.button if b.key and b.key.startswith("example/tools/")]
    assert "example/tools/17 × 23" not in keys and "example/tools/Time in Tokyo" in keys
    at.toggle(key="settings.tools.enabled.calculator").set_value(True).run()


def test_single_line_breaks_become_hard_breaks_outside_fenced_code():
    assert keep_line_breaks("Red\nGreen\n\nBlue") == "Red  \nGreen\n\nBlue"
    code = "```python\nx = 1\ny = 2\n```"
    assert keep_line_breaks(code) == code
    assert keep_line_breaks("a\n~~~\nb\nc\n~~~\nd\ne") == "a\n~~~\nb\nc\n~~~\nd  \ne"
    assert keep_line_breaks("ends with a break  \nnext") == "ends with a break  \nnext"
    assert keep_line_breaks("one line") == "one line"
