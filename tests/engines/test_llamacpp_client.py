"""The llama.cpp backend on the embedded SmolLM2 GGUF, used as it is (no conversion): answers, forced calls and
structured output under the shared grammar, Stop, two sessions taking turns, and conversations whose next turns reuse
their cached prefix while answering exactly as a context of their own does."""

from __future__ import annotations

import json
import threading
import time

from app.clients.client_protocol import GenerationParams, ResponseFormat, ToolRequest
from app.config import ModelSettings
from tests.helpers import collect

GREEDY = GenerationParams(temperature=0.0, max_new_tokens=40)
CARD = GenerationParams(temperature=0.2, top_p=0.9, repetition_penalty=1.1, seed=0, max_new_tokens=40)  # its card's
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "required": ["expression"],
                   "properties": {"expression": {"type": "string", "maxLength": 40}}}}}
SHIRT = {"type": "object", "required": ["size", "price"], "additionalProperties": False,
         "properties": {"size": {"enum": ["S", "M", "L"]}, "price": {"type": "number"}}}


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_the_embedded_gguf_answers(gguf_client):
    text, deltas = collect(gguf_client, ask("What is the capital of France?"), CARD)
    assert "Paris" in text and deltas[-1].finish_reason == "stop"
    metrics = deltas[-1].metrics
    assert metrics.completion_tokens > 0 and metrics.prompt_tokens > 10


def test_a_seed_repeats_its_answer_and_no_seed_draws_anew(gguf_client):
    story = ask("Write one sentence about the sea.")
    seeded = GenerationParams(temperature=1.0, seed=11, max_new_tokens=20)
    first, _ = collect(gguf_client, story, seeded)
    assert collect(gguf_client, story, seeded)[0] == first
    unseeded = {collect(gguf_client, story, GenerationParams(temperature=1.0, max_new_tokens=20))[0] for _ in range(3)}
    assert len(unseeded) > 1  # after a seeded reply, unseeded ones do not all replay its draws


def test_conversations_taking_turns_answer_as_on_a_context_of_their_own(gguf_client):
    """Two conversations alternate on the one context: each next turn restores its own sequence (kept when the other
    one took the context), reads only its new tokens, says so, and answers exactly as a context that only ever held
    that conversation. (Bitwise only so: llama.cpp's results depend slightly on how a sequence was split into batches,
    so a shared system prompt read once for two conversations can change a word in the second.)"""
    from app.clients.llamacpp.llamacpp_client import LlamaCppClient

    histories = {"a": [{"role": "system", "content": "You are a friendly guide to Italy."}, *ask("Name a city.")],
                 "b": [{"role": "system", "content": "Marine biology tutor, short answers."}, *ask("Name a fish.")]}
    own = {name: LlamaCppClient(ModelSettings(backend="llamacpp", max_context_tokens=2048, prompt_cache_mb=0))
           for name in histories}
    previous: dict[str, int] = {}
    try:
        for turn in range(3):
            for name, history in histories.items():
                text, deltas = collect(gguf_client, history, GREEDY)
                metrics = deltas[-1].metrics
                assert text == collect(own[name], history, GREEDY)[0]
                if turn:  # its previous turn came from the cache: the prompt, and the answer as far as the model
                    # wrote it in the tokens its text is read back as (a model may spell a word in other tokens
                    # than the tokenizer would: "(Bucephalai" was, and the cache compares tokens)
                    assert previous[name] < metrics.cached_tokens < metrics.prompt_tokens
                previous[name] = metrics.prompt_tokens
                histories[name] = [*history, {"role": "assistant", "content": text}, *ask(f"Tell me more, {turn}.")]
    finally:
        for client in own.values():
            client.close()
    stats = gguf_client.prompt_cache_stats()
    assert stats.entries >= 2 and 0 < stats.bytes <= stats.max_bytes


def test_a_forced_call_follows_the_grammar(gguf_client):
    tools = ToolRequest((CALCULATOR,), choice="calculator")
    _, deltas = collect(gguf_client, ask("What is 17 times 23?"),
                        GenerationParams(temperature=0.0, max_new_tokens=100), tools)
    calls = deltas[-1].tool_calls
    assert [call.name for call in calls] == ["calculator"]
    assert isinstance(calls[0].arguments["expression"], str)


def test_a_json_schema_reply_validates(gguf_client):
    text, _ = collect(gguf_client, ask("A medium shirt for 12 dollars, as JSON."),
                              GenerationParams(temperature=0.7, seed=3, max_new_tokens=60),
                              response_format=ResponseFormat("json_schema", SHIRT))
    reply = json.loads(text)
    assert reply["size"] in ("S", "M", "L") and isinstance(reply["price"], int | float)


def test_stop_ends_a_long_answer_at_once(gguf_client):
    cancel = threading.Event()
    params = GenerationParams(temperature=0.0, max_new_tokens=2000, ignore_eos=True)
    started = time.monotonic()
    texts = []
    for delta in gguf_client.stream(ask("Tell a long story."), params, cancel):
        texts.append(delta.text)
        if sum(1 for t in texts if t) == 5:
            cancel.set()
    assert time.monotonic() - started < 30
    assert 5 <= sum(1 for t in texts if t) < 50


def test_two_sessions_take_turns_and_each_gets_its_lone_answer(gguf_client):
    questions = {"a": "What is the capital of France?", "b": "Name a fruit."}
    alone = {name: collect(gguf_client, ask(question), CARD)[0] for name, question in questions.items()}
    together: dict[str, str] = {}

    def run(name: str) -> None:
        together[name] = collect(gguf_client, ask(questions[name]), CARD)[0]

    threads = [threading.Thread(target=run, args=(name,)) for name in questions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert together == alone and all(alone.values())


def test_the_chat_page_runs_on_the_gguf(gguf_client, monkeypatch, tmp_path):
    """The sidebar's llama.cpp inputs and a first answer on the Chat page (AppTest), the GGUF loaded by the page."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.helpers import MAIN

    # A database of its own: settings another test's page remembered (a backend) would come back instead.
    monkeypatch.setenv("DEMO_DATABASE_URL", f"sqlite:///{tmp_path}/conversations.db")
    monkeypatch.setenv("DEMO_BACKEND", "llamacpp")
    monkeypatch.setenv("DEMO_MODEL", "")
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(MAIN, default_timeout=120)
        at.run()
        assert not at.exception
        assert any("llama.cpp" in caption.value for caption in at.caption)
        assert at.number_input(key="settings.model.llamacpp_threads").value == 0
        at.chat_input[0].set_value("What is 2+2?").run()
        assert not at.exception
        assert at.chat_message[1].markdown[0].value.strip()
    finally:
        st.cache_resource.clear()
