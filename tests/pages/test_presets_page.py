"""Presets in the sidebar, through AppTest on the tiny model and the app's own database: a built-in preset applied
sets the system prompt and the sliders, and the next answer is written with them; the current settings saved as a
preset come back in a new session and apply to a new conversation; a preset with tools switches them on the Tools
page; one with a model switches the model; edited, refused and deleted as a user would."""

from __future__ import annotations

from app.presets.built_in import BRIEF, PRECISE
from app.presets.preset import parse_preset
from app.storage.presets import PresetStore
from app.tools import load_tools
from tests.helpers import open_app

CHAT_PAGE = "frontends/streamlit/views/chat.py"
TOOLS_PAGE = "frontends/streamlit/views/tools.py"


def _said(at) -> str:
    return "\n".join(str(e.value) for kind in ("success", "error", "warning", "caption") for e in getattr(at, kind))


def _pick(at, key: str) -> None:
    at.selectbox(key="presets.pick").set_value(key).run()
    at.button(key="presets_apply").click().run()
    assert not at.exception, at.exception


def test_a_built_in_preset_sets_the_sidebar_and_the_next_answer_uses_it(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:
        options = at.selectbox(key="presets.pick").options
        assert options[:3] == ["Precise · built-in", "Brief · built-in", "Creative · built-in"]
        _pick(at, "built-in:Brief")
        assert at.text_area(key="system_prompt").value == BRIEF.system_prompt
        assert at.slider(key="temperature").value == 0.2 and at.slider(key="top_p").value == 0.9
        assert at.number_input(key="max_new_tokens").value == 96
        assert "Applied **Brief**." in _said(at)
        assert BRIEF.description in _said(at)  # what it is for, under the choice
        at.chat_input[0].set_value("Hello").run()
        conversation = at.session_state["conversation/chat"]
        assert conversation.messages[-1].role == "assistant"
        assert conversation.messages[-1].metrics.completion_tokens <= 96
        _pick(at, "built-in:Precise")  # leaves the system prompt and max new tokens as they were
        assert at.slider(key="temperature").value == PRECISE.temperature == 0.0
        assert at.text_area(key="system_prompt").value == BRIEF.system_prompt
        assert at.number_input(key="max_new_tokens").value == 96


def test_settings_saved_as_a_preset_come_back_in_a_new_session(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:
        at.text_area(key="system_prompt").set_value("You review Python code.").run()
        at.slider(key="temperature").set_value(0.35).run()
        at.text_input(key="presets.name").set_value("Code reviewer").run()
        at.button(key="presets_save").click().run()
        assert "Saved the preset **Code reviewer**" in _said(at)
        [stored] = PresetStore(database.engine).list("local")
        assert stored.name == "Code reviewer" and stored.system_prompt == "You review Python code."
        assert stored.temperature == 0.35 and stored.model is None and stored.tools is None
        at.text_input(key="presets.name").set_value("precise").run()  # a built-in's name, in other letters
        at.button(key="presets_save").click().run()
        assert "Not saved: 'precise' is a built-in preset's name" in _said(at)
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:  # a new session, the defaults again
        at.text_area(key="system_prompt").set_value("").run()
        at.slider(key="temperature").set_value(0.7).run()
        assert "Code reviewer" in at.selectbox(key="presets.pick").options
        _pick(at, "mine:Code reviewer")
        assert at.text_area(key="system_prompt").value == "You review Python code."
        assert at.slider(key="temperature").value == 0.35
        at.chat_input[0].set_value("def f(): pass").run()
        saved = at.session_state["conversation/chat"]
        assert saved.messages[-1].role == "assistant"

        at.slider(key="temperature").set_value(0.5).run()  # edited: updated with the settings now
        at.button(key="presets_update").click().run()
        [stored] = PresetStore(database.engine).list("local")
        assert stored.temperature == 0.5 and stored.name == "Code reviewer"
        at.button(key="presets_delete").click().run()
        assert "Deleted the preset **Code reviewer**" in _said(at)
        assert PresetStore(database.engine).list("local") == []


def test_a_preset_with_tools_switches_them_on_the_tools_page(monkeypatch, tiny_model_dir, database):
    sums = parse_preset({"name": "Sums", "temperature": 0.0, "tools": ["calculator"]})
    PresetStore(database.engine).save("local", sums)
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:
        _pick(at, "mine:Sums")  # applied on the Chat page: the Tools page takes them when it is drawn
        at.switch_page(TOOLS_PAGE).run()
        assert not at.exception
        enabled = {name: at.session_state[f"settings.tools.enabled.{name}"] for name in load_tools().names}
        assert enabled["calculator"] is True and sum(enabled.values()) == 1, enabled
        at.text_input(key="presets.name").set_value("Sums and words").run()
        at.toggle(key="settings.tools.enabled.count_words").set_value(True).run()
        at.checkbox(key="presets.include_tools").check().run()
        at.button(key="presets_save").click().run()
        saved = {preset.name: preset for preset in PresetStore(database.engine).list("local")}
        assert saved["Sums and words"].tools == ["calculator", "count_words"]


def test_a_preset_with_a_model_switches_to_it(monkeypatch, tiny_model_dir, tmp_path, database):
    other = tmp_path / "other-model"
    other.symlink_to(tiny_model_dir, target_is_directory=True)
    data = {"name": "Other model", "model": {"backend": "hf", "model_path": str(other)}}
    PresetStore(database.engine).save("local", parse_preset(data))
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:
        _pick(at, "mine:Other model")
        assert at.text_input(key="settings.model.model_path").value == str(other)
        assert at.selectbox(key="backend").value == "hf"
        assert at.session_state["_sidebar"].model.model_path == str(other)  # what the pages load


def test_a_preset_for_another_server_never_takes_the_key_typed_for_this_one(monkeypatch, tiny_model_dir, database):
    shared = parse_preset({"name": "Their server", "model": {"backend": "openai",
                                                             "api_base_url": "http://127.0.0.1:9/v1"}})
    PresetStore(database.engine).save("local", shared)
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE) as at:
        before = at.text_input(key="settings.model.model_path").value
        at.selectbox(key="backend").set_value("openai").run()
        at.text_input(key="settings.model.api_base_url").set_value("http://127.0.0.1:8/v1").run()
        at.text_input(key="settings.model.api_key").set_value("sk-mine").run()
        _pick(at, "mine:Their server")
        model = at.session_state["_sidebar"].model
        assert model.api_base_url == "http://127.0.0.1:9/v1" and model.api_key != "sk-mine"
        assert at.text_input(key="settings.model.api_key").value == ""
        at.selectbox(key="backend").set_value("hf").run()  # the local model path was left as it was
        assert at.text_input(key="settings.model.model_path").value == before
