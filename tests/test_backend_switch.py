"""Switching backends from the sidebar at runtime (AppTest): HF -> vLLM -> OpenAI API, the conversation kept."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def status_line(at):
    return next(c.value for c in at.caption if " · " in c.value and "context" in c.value or "API" in c.value)


def test_switch_hf_vllm_openai_keeps_the_conversation(monkeypatch, tiny_model_dir, vllm_server):
    monkeypatch.setenv("DEMO_MODEL", str(tiny_model_dir))
    st.cache_resource.clear()
    at = AppTest.from_file(MAIN, default_timeout=600)
    at.run()
    at.slider(key="temperature").set_value(0.0)
    at.number_input(key="max_new_tokens").set_value(8)
    at.run()
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

    at.selectbox(key="backend").set_value("hf").run()  # and back: the engine is released, the model path remembered
    assert status_line(at).startswith("transformers") and len(at.chat_message) == 6
    st.cache_resource.clear()
