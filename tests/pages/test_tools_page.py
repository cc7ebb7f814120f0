"""The Tools page through Streamlit's AppTest: tiny model for the mechanics, SmolLM2 for a real round trip."""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_PAGE, TOOLS_PAGE, open_app


@pytest.fixture
def tiny_app(monkeypatch, tiny_model_dir, database):  # a database of its own: no other test's documents in it
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE, timeout=180, temperature=0.0,
                  max_new_tokens=300) as at:
        yield at


@pytest.fixture
def smol_app(monkeypatch, smollm2_dir, database):
    with open_app(monkeypatch, smollm2_dir, page=TOOLS_PAGE, timeout=180, temperature=0.0,
                  max_new_tokens=60) as at:
        yield at


def ask(at, text):
    at.chat_input(key="tools_input").set_value(text).run()
    assert not at.exception


def test_the_sidebar_offers_tools_choice_and_dialect(tiny_app):
    names = ["random_number", "current_time", "calculator", "convert_units", "count_words", "get_weather"]
    assert all(tiny_app.toggle(key=f"settings.tools.enabled.{name}").value for name in names)
    assert tiny_app.selectbox(key="settings.tools.choice").options == ["auto", "none", "required", *names]
    assert tiny_app.selectbox(key="settings.tools.dialect").options[0] == "auto (Hermes / Qwen (<tool_call> tags))"
    assert any("tools described through the model's chat template" in c.value for c in tiny_app.caption)


def test_a_forced_call_shows_a_card_with_arguments_and_result(tiny_app):
    tiny_app.selectbox(key="settings.tools.choice").set_value("calculator").run()
    ask(tiny_app, "What is 6 * 7?")
    user, assistant = tiny_app.chat_message
    assert user.markdown[0].value == "What is 6 * 7?"
    (card,) = assistant.status
    assert card.label.startswith("calculator") and " → " in card.label and card.label.endswith(" s")
    captions = [c.value for c in card.caption]
    assert captions == ["Arguments", "Result"]
    assert json.loads(card.code[0].value).keys() == {"expression"} and card.code[1].value
    metrics = [c.value for c in assistant.caption if "tokens" in c.value]
    assert len(metrics) == 2  # the call's generation and the answer's


def test_switching_a_tool_off_removes_it_from_tool_choice(tiny_app):
    tiny_app.selectbox(key="settings.tools.choice").set_value("calculator").run()
    tiny_app.toggle(key="settings.tools.enabled.calculator").set_value(False).run()
    assert not tiny_app.exception
    assert tiny_app.selectbox(key="settings.tools.choice").value == "auto"
    assert "calculator" not in tiny_app.selectbox(key="settings.tools.choice").options


def test_settings_and_conversation_survive_a_visit_to_the_chat_page(tiny_app):
    tiny_app.toggle(key="settings.tools.enabled.get_weather").set_value(False).run()
    tiny_app.selectbox(key="settings.tools.choice").set_value("none").run()
    ask(tiny_app, "Hello")
    tiny_app.switch_page(CHAT_PAGE).run()
    assert not tiny_app.exception and len(tiny_app.chat_message) == 0  # each page has its own conversation
    tiny_app.switch_page(TOOLS_PAGE).run()
    assert tiny_app.toggle(key="settings.tools.enabled.get_weather").value is False
    assert tiny_app.selectbox(key="settings.tools.choice").value == "none"
    assert len(tiny_app.chat_message) == 2


def test_regenerate_replaces_the_whole_tool_turn(tiny_app):
    tiny_app.selectbox(key="settings.tools.choice").set_value("calculator").run()  # read-only: runs at once
    ask(tiny_app, "What is 6 * 7?")
    first = tiny_app.chat_message[1].status[0].code[0].value
    tiny_app.button(key="regenerate/tools/1").click().run()
    assert not tiny_app.exception
    assert len(tiny_app.chat_message) == 2 and len(tiny_app.chat_message[1].status) == 1
    assert tiny_app.chat_message[1].status[0].code[0].value == first  # greedy: the same call again


def test_smollm2_calls_the_calculator_and_answers_from_the_result(smol_app):
    smol_app.selectbox(key="settings.tools.choice").set_value("calculator").run()
    ask(smol_app, "What is 17 * 23?")
    _, assistant = smol_app.chat_message
    (card,) = assistant.status
    assert card.label.startswith("calculator → 17 * 23 = 391 · ") and "failed" not in card.label
    assert card.code[1].value == "17 * 23 = 391"
    answer = "".join(md.value for md in assistant.markdown)
    assert "391" in answer and "<tool_call>" not in answer
