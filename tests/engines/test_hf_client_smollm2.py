"""The HF client on the real embedded SmolLM2-135M-Instruct: behaviour that needs a model that makes sense."""

from __future__ import annotations

import threading

from app.clients.client_protocol import GenerationParams
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from tests.helpers import collect

CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def test_answers_sensibly_and_stops_at_end_of_turn(smol_client):
    text, deltas = collect(smol_client, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=64))
    final = deltas[-1]
    assert "Paris" in text
    assert final.finish_reason == "stop"
    assert final.metrics.completion_tokens < 64
    assert "<|im_end|>" not in text


def test_end_of_turn_token_is_derived_from_the_template(smol_client):
    assert smol_client.tokenizer.convert_tokens_to_ids("<|im_end|>") in smol_client.stop_token_ids


def test_stop_string_ends_the_answer_before_it(smol_client):
    text, deltas = collect(smol_client, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=64, stop=("Paris",)))
    final = deltas[-1]
    assert text and "Paris" not in text
    assert final.finish_reason == "stop"


def test_max_new_tokens_gives_finish_reason_length(smol_client):
    story = [{"role": "user", "content": "Write a long story about a dragon."}]
    text, deltas = collect(smol_client, story, GenerationParams(temperature=0.0, max_new_tokens=12))
    final = deltas[-1]
    assert final.finish_reason == "length" and final.metrics.completion_tokens == 12
    assert len(text.split()) >= 3


def test_cancel_midway(smol_client):
    story = [{"role": "user", "content": "Write a long story about a dragon."}]
    cancel = threading.Event()
    chunks = []
    for delta in smol_client.stream(story, GenerationParams(temperature=0.0, max_new_tokens=300), cancel):
        chunks.append(delta)
        if len(chunks) == 4:
            cancel.set()
    assert chunks[-1].finish_reason == "cancelled"
    assert chunks[-1].metrics.completion_tokens < 20


def test_truncation_keeps_the_newest_question_answerable(smollm2_dir):
    client = HFClient(ModelSettings(model_path=str(smollm2_dir), max_context_tokens=200))
    history = []
    for i in range(8):
        history += [{"role": "user", "content": f"Tell me fact number {i} about the ocean."},
                    {"role": "assistant", "content": "The ocean covers about 71 percent of the Earth's surface."}]
    text, deltas = collect(client, [*history, *CAPITAL], GenerationParams(temperature=0.0, max_new_tokens=48))
    final = deltas[-1]
    assert final.metrics.dropped_messages > 0
    assert final.metrics.prompt_tokens <= 200 - 48
    assert "Paris" in text
