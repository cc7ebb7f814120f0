"""Switching backends from the sidebar at runtime (AppTest): HF -> vLLM -> OpenAI API, the conversation kept."""

from __future__ import annotations

from tests.helpers import open_app


def status_line(at):
    """The line under the title that names the loaded model's backend (the picker's own captions come first)."""
    return next(c.value for c in at.caption if c.value.startswith(("transformers", "vLLM", "OpenAI", "API"))
                or "API" in c.value)


def test_switch_hf_vllm_openai_keeps_the_conversation(monkeypatch, tiny_model_dir, vllm_server):
    with open_app(monkeypatch, tiny_model_dir, timeout=600, temperature=0.0, max_new_tokens=8) as at:
        assert status_line(at).startswith("transformers")

        at.chat_input(key="chat_input").set_value("First, on transformers").run()
        at.selectbox(key="backend").set_value("vllm").run()
        at.selectbox(key="settings.model.vllm_dtype").set_value("float32").run()
        assert not at.exception and status_line(at).startswith("vLLM")
        at.chat_input(key="chat_input").set_value("Second, on vLLM").run()

        at.selectbox(key="backend").set_value("openai").run()
        at.text_input(key="settings.model.api_base_url").set_value(vllm_server).run()
        assert not at.exception and status_line(at).startswith("OpenAI-compatible API · smollm2")
        at.chat_input(key="chat_input").set_value("Third, through the API").run()

        roles = [m.name for m in at.chat_message]
        assert roles == ["user", "assistant"] * 3
        users = [m.markdown[0].value for m in at.chat_message if m.name == "user"]
        assert users == ["First, on transformers", "Second, on vLLM", "Third, through the API"]
        assert all(any("tokens" in c.value for c in m.caption) for m in at.chat_message if m.name == "assistant")

        # And back: the engine is released, the model path remembered.
        at.selectbox(key="backend").set_value("hf").run()
        assert status_line(at).startswith("transformers") and len(at.chat_message) == 6
