"""The HF client on a tiny random model: every path that does not depend on the answer making sense."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import jsonschema
import pytest
import torch
from transformers import AutoTokenizer

from app.clients.client_protocol import ClientError, GenerationParams, ResponseFormat, ToolRequest
from app.clients.hf.hf_client import HFClient
from app.clients.hf.streamer import IncrementalTextStreamer
from app.config import ModelSettings
from tests.helpers import collect
from tests.tiny_model import TEST_DEVICE

GREEDY = GenerationParams(temperature=0.0, max_new_tokens=24)
HELLO = [{"role": "user", "content": "Hello there"}]


def generate_ids(client, prompt_ids, n):
    with torch.inference_mode():
        out = client.model.generate(input_ids=torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False,
                                    min_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def test_streamed_text_equals_one_shot_decode(tiny_client):
    text, deltas = collect(tiny_client, HELLO, GREEDY)
    ids = generate_ids(tiny_client, tiny_client.template.render(HELLO).token_ids, 24)
    assert text == tiny_client.tokenizer.decode(ids, skip_special_tokens=True)
    final = deltas[-1]
    assert final.finish_reason == "length"
    assert final.metrics.completion_tokens == 24
    assert final.metrics.prompt_tokens == len(tiny_client.template.render(HELLO).token_ids)
    assert final.metrics.time_to_first_token_s > 0 and final.metrics.tokens_per_second > 0


def test_incremental_detokeniser_handles_multibyte_characters(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "Zwölf Boxkämpfer 東京 café 🙂 naïve"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    emitted: list[tuple[str, int]] = []
    streamer = IncrementalTextStreamer(tokenizer, lambda chunk, tokens: emitted.append((chunk, tokens)))
    streamer.put(torch.tensor([[0]]))  # the prompt, skipped
    for token_id in ids:  # one token at a time, as generate() hands them over
        streamer.put(torch.tensor([token_id]))
    streamer.end()
    chunks = [chunk for chunk, _ in emitted]
    assert "".join(chunks) == text
    assert not any("\ufffd" in chunk for chunk in chunks)
    assert sum(tokens for _, tokens in emitted) == streamer.completion_tokens == len(ids)


def test_greedy_is_deterministic_and_sampling_respects_seed(tiny_client):
    assert collect(tiny_client, HELLO, GREEDY)[0] == collect(tiny_client, HELLO, GREEDY)[0]
    sampled = GenerationParams(temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=16, seed=7)
    assert collect(tiny_client, HELLO, sampled)[0] == collect(tiny_client, HELLO, sampled)[0]


def test_stop_string_cuts_the_answer_and_reports_stop(tiny_client):
    full, _ = collect(tiny_client, HELLO, GREEDY)
    stop = full[10:14]
    text, deltas = collect(tiny_client, HELLO, GenerationParams(temperature=0.0, max_new_tokens=24, stop=(stop,)))
    assert text == full[: full.index(stop)]
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].metrics.completion_tokens < 24


def test_cancel_midway_stops_the_worker_thread(tiny_client):
    cancel = threading.Event()
    seen = []
    params = GenerationParams(temperature=0.0, max_new_tokens=400)
    for delta in tiny_client.stream(HELLO, params, cancel):
        seen.append(delta)
        if len(seen) == 5:
            cancel.set()
    final = seen[-1]
    assert final.finish_reason == "cancelled"
    assert final.metrics.completion_tokens < 50
    assert not [t for t in threading.enumerate() if t.name == "hf-generate"]


def test_closing_the_stream_early_cancels_and_releases_the_model(tiny_client):
    stream = tiny_client.stream(HELLO, GenerationParams(temperature=0.0, max_new_tokens=400), threading.Event())
    first = next(d for d in stream if d.text)
    stream.close()
    assert first.metrics.finish_reason == "cancelled"
    assert first.metrics.completion_tokens < 400
    assert collect(tiny_client, HELLO, GREEDY)[1][-1].finish_reason == "length"  # the lock was released


def test_concurrent_sessions_are_not_mixed(tiny_client):
    prompts = [[{"role": "user", "content": f"Question number {i}"}] for i in range(4)]
    expected = [collect(tiny_client, p, GenerationParams(temperature=0.0, max_new_tokens=40))[0] for p in prompts]
    results: dict[int, str] = {}

    def worker(i):
        results[i] = collect(tiny_client, prompts[i], GenerationParams(temperature=0.0, max_new_tokens=40))[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [results[i] for i in range(4)] == expected


def test_with_batching_off_a_waiting_session_is_told_and_can_cancel_while_waiting(tiny_model_dir):
    tiny_client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir),
                                         device=TEST_DEVICE, hf_max_batch=1))
    assert tiny_client.decoder is None and "batches" not in tiny_client.describe()
    hold = threading.Event()
    release = threading.Event()

    def occupy():
        # A session that holds the model until released: its stream keeps the lock while it is not consumed.
        for _ in tiny_client.stream(HELLO, GenerationParams(temperature=0.0, max_new_tokens=400), release):
            hold.set()
            release.wait(10)

    holder = threading.Thread(target=occupy)
    holder.start()
    hold.wait(10)
    cancel = threading.Event()
    notices = []
    started = time.monotonic()
    for delta in tiny_client.stream(HELLO, GREEDY, cancel):
        if delta.notice:
            notices.append(delta.notice)
            cancel.set()
        if delta.finish_reason:
            assert delta.finish_reason == "cancelled"
    release.set()
    holder.join(10)
    assert notices and "Waiting" in notices[0]
    assert time.monotonic() - started < 5
    tiny_client.close()


def test_oldest_turns_are_dropped_to_fit_the_context_window(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), max_context_tokens=120))
    history = []
    for i in range(6):
        history += [{"role": "user", "content": f"Old question {i} about Paris"},
                    {"role": "assistant", "content": f"Old answer {i} about Berlin weather"}]
    messages = [{"role": "system", "content": "Be brief."}, *history, {"role": "user", "content": "New question"}]
    text, deltas = collect(client, messages, GenerationParams(temperature=0.0, max_new_tokens=40))
    notices = [d.notice for d in deltas if d.notice]
    assert notices and "Dropped the" in notices[0] and "120-token context window" in notices[0]
    final = deltas[-1].metrics
    assert final.dropped_messages > 0 and final.prompt_tokens <= 120 - 40
    assert final.completion_tokens == 40


CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object", "required": ["expression"],
                                                              "properties": {"expression": {"type": "string"}}}}}


def _tool_turns(count: int) -> list[dict]:
    """`count` past turns, each a question, a calculator call, its result and the answer."""
    turns = []
    for i in range(count):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "calculator", "arguments": json.dumps({"expression": f"{i} * 2"})}}
        turns += [{"role": "user", "content": f"What is {i} times two?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": f"call_{i}", "content": str(i * 2)},
                  {"role": "assistant", "content": f"It is {i * 2}."}]
    return turns


def test_fitting_keeps_the_newest_whole_turns_that_fit_exactly_as_counting_every_cut_would(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), max_context_tokens=400))
    tools = ToolRequest(tuple([CALCULATOR]))
    messages = [{"role": "system", "content": "Be brief."}, *_tool_turns(40), {"role": "user", "content": "And 7?"}]
    prompt = client.template.prepare(messages, GenerationParams(max_new_tokens=40), tools)
    # The reference: every cut from the oldest turn on, the first whose prompt fits 400 - 40 tokens.
    cuts = [i for i, message in enumerate(messages) if message["role"] == "user"]
    reference = next(
        cut for cut in cuts if len(client.template.render([messages[0], *messages[cut:]], tools).token_ids) <= 360
    )
    assert prompt.dropped_messages == reference - 1 > 0
    assert prompt.token_ids == client.template.render([messages[0], *messages[reference:]], tools).token_ids
    assert "calculator" in client.tokenizer.decode(prompt.token_ids)  # calls and results kept, in whole turns


def test_fitting_ten_thousand_messages_renders_each_message_about_once(tiny_model_dir, monkeypatch):
    """Linear, not quadratic: counting the prompt once per dropped turn took minutes for 10,000 messages."""
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), max_context_tokens=300))
    rendered: list[int] = []
    render = client.template.render
    monkeypatch.setattr(client.template, "render",
                        lambda messages, tools=None, images=None, thinking=None: rendered.append(len(messages))
                        or render(messages, tools, images, thinking))
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"short message number {i}"} for i in range(10_001)]
    started = time.monotonic()
    prompt = client.template.prepare(messages, GenerationParams(max_new_tokens=40), None)
    assert time.monotonic() - started < 5
    assert sum(rendered) < 1.2 * len(messages)  # the whole once, then only a few spans of what fits
    dropped = prompt.dropped_messages
    assert messages[dropped]["role"] == "user" and len(prompt.token_ids) <= 260  # whole turns, within budget
    assert len(render(messages[dropped - 2:]).token_ids) > 260  # and one more turn would not have fitted


def test_a_message_longer_than_the_context_window_is_a_clear_error(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), max_context_tokens=64))
    with pytest.raises(ClientError, match="context window holds 64, and at least 32 of them must stay free"):
        collect(client, [{"role": "user", "content": "word " * 200}], GenerationParams(max_new_tokens=40))


def test_stop_tokens_come_from_the_tokenizer_and_the_template(tiny_client):
    im_end = tiny_client.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tiny_client.stop_token_ids == [im_end]


@pytest.mark.parametrize("max_batch", [1, 8])
def test_generation_failure_in_the_thread_becomes_a_client_error(tiny_model_dir, max_batch, monkeypatch):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE,
                                    hf_max_batch=max_batch))

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory (simulated by the test)")

    with monkeypatch.context() as patched:
        patched.setattr(client.model, "forward", broken)
        with pytest.raises(ClientError, match="Generation failed: out of memory"):
            collect(client, HELLO, GREEDY)
    assert collect(client, HELLO, GREEDY)[1][-1].finish_reason == "length"  # and the engine goes on
    client.close()


@pytest.mark.parametrize(
    "path, message",
    [("/no/such/model", "does not exist"), ("/tmp", "no config.json")],
)
def test_bad_model_paths_are_actionable_errors(path, message):
    with pytest.raises(ClientError, match=message):
        HFClient(ModelSettings(dtype="float32", model_path=path))


def test_corrupt_weights_are_reported_not_raised_raw(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in tiny_model_dir.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ClientError, match="Could not load the model"):
        HFClient(ModelSettings(dtype="float32", model_path=str(broken)))


@pytest.mark.parametrize(
    "kwargs, message",
    [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_k": -2}, "top_k"),
     ({"max_new_tokens": 0}, "max_new_tokens"), ({"repetition_penalty": 0}, "repetition_penalty"),
     ({"stop": ("",)}, "stop strings")],
)
def test_invalid_sampling_values_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GenerationParams(**kwargs)


SHIRT = {"type": "object", "properties": {"in_stock": {"type": "boolean"}, "size": {"enum": ["S", "M", "L"]}},
         "required": ["in_stock", "size"]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_json_schema_response_format_makes_even_a_random_model_answer_valid_json(tiny_client, seed):
    sampled = GenerationParams(temperature=1.0, max_new_tokens=200, seed=seed)
    text, deltas = collect(tiny_client, HELLO, sampled, response_format=ResponseFormat("json_schema", SHIRT))
    jsonschema.validate(json.loads(text), SHIRT)
    assert deltas[-1].finish_reason == "stop"
    free, _ = collect(tiny_client, HELLO, sampled)  # the same model and seed without the format: not JSON
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)


def test_with_tools_on_offer_a_json_response_format_allows_that_json_or_a_call(tiny_client):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}}
    for seed in range(6):  # whichever of the two a random model picks, it must be a whole one
        text, deltas = collect(tiny_client, HELLO, GenerationParams(temperature=1.0, max_new_tokens=200, seed=seed),
                               ToolRequest((weather,)), response_format=ResponseFormat("json_schema", SHIRT))
        if deltas[-1].tool_calls:
            assert text == "" and deltas[-1].tool_calls[0].arguments["city"] in ("Paris", "Rome")
        else:
            jsonschema.validate(json.loads(text), SHIRT)


def test_a_schema_the_grammar_engine_cannot_enforce_is_a_clear_error(tiny_client):
    with pytest.raises(ClientError, match="JSON Schema cannot be enforced"):
        collect(tiny_client, HELLO, GREEDY, response_format=ResponseFormat("json_schema", {"type": "nonsense"}))


def test_any_integer_seed_generates_and_seeds_modulo_two_to_the_64(tiny_client):
    sampled = GenerationParams(temperature=1.0, max_new_tokens=8)
    answers = [collect(tiny_client, HELLO, replace(sampled, seed=seed))[0] for seed in (2**70 + 5, 5, -(2**70))]
    assert answers[0] == answers[1]  # torch.manual_seed refused 2**70 ("Overflow when unpacking long")
    assert answers[2] == collect(tiny_client, HELLO, replace(sampled, seed=-(2**70) % 2**64))[0]


def test_a_newest_turn_longer_than_the_usual_budget_is_answered_alone_in_the_room_left(tiny_model_dir):
    """The answer's usual room is min(max new tokens, half the window); a newest turn longer than the rest is still
    answered, alone and shortened, while it leaves 64 tokens (as llama-server and vLLM answer any prompt that fits:
    Codex sends no output limit and was refused an 8,084-token prompt on an 8,192-token model). One that does not
    leave them is refused with its size and the window's."""
    from app.clients.client_protocol import ClientError

    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), max_context_tokens=200))

    def turn(words: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": "Old question"}, {"role": "assistant", "content": "Old answer"},
                {"role": "user", "content": " ".join(["Paris"] * words)}]

    def size(messages: list[dict[str, str]]) -> int:
        return len(client.template.render(messages[-1:]).token_ids)

    words = next(n for n in range(1, 400) if size(turn(n)) >= 110)  # over the usual 100, under 200 - 64
    text, deltas = collect(client, turn(words), GenerationParams(temperature=0.0, max_new_tokens=100))
    final = deltas[-1].metrics
    assert final.prompt_tokens == size(turn(words)) and final.dropped_messages == 2
    assert final.completion_tokens == 200 - final.prompt_tokens and deltas[-1].finish_reason == "length"

    too_long = next(n for n in range(words, 800) if size(turn(n)) > 200 - 64)
    with pytest.raises(ClientError) as refused:
        collect(client, turn(too_long), GenerationParams(temperature=0.0, max_new_tokens=100))
    assert f"The prompt has {size(turn(too_long))} tokens" in str(refused.value)
    assert "context window holds 200" in str(refused.value) and "at least 64" in str(refused.value)
    client.close()
