"""Continuous batching on the HF backend (app/clients/hf/batch.py): concurrent replies decoded together, each one the
reply it would be alone, with its own settings, grammar, Stop and end; on a tiny model and on the real SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import torch
from transformers import DynamicCache

from app.clients.client_protocol import ClientError, GenerationParams, ResponseFormat, ToolRequest
from app.clients.hf.batch_cache import BatchCache
from app.clients.hf.grammar import GrammarViolation
from app.clients.hf.hf_client import HFClient
from app.clients.hf.sampling import TokenPicker
from app.config import ModelSettings
from tests.helpers import collect, open_app
from tests.tiny_model import TEST_DEVICE

GREEDY = GenerationParams(temperature=0.0, max_new_tokens=40)
SHIRT = {"type": "object", "properties": {"in_stock": {"type": "boolean"}, "size": {"enum": ["S", "M", "L"]}},
         "required": ["in_stock", "size"]}
CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object", "required": ["expression"],
                                                              "properties": {"expression": {"type": "string"}}}}}


def question(i: int) -> list[dict[str, str]]:
    # Prompts of different lengths: the batch's rows are left-padded to the longest.
    return [{"role": "user", "content": f"Question number {i}: " + "tell me more " * (3 * i)}]


def outcome(client: HFClient, messages, params=GREEDY, **kwargs) -> tuple[str, str | None, int]:
    text, deltas = collect(client, messages, params, **kwargs)
    return text, deltas[-1].finish_reason, deltas[-1].metrics.completion_tokens


def at_once(jobs: list[Callable[[], Any]], stagger_s: float = 0.0) -> list[Any]:
    """Run `jobs` on threads of their own (job i starting i * stagger_s late); their results in order."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        time.sleep(i * stagger_s)
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def queue_client(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir),
                                    device=TEST_DEVICE, hf_max_batch=1))
    yield client
    client.close()


def test_a_text_model_is_batched_and_says_so(tiny_client):
    assert tiny_client.decoder is not None and tiny_client.queue is None
    assert "batches of 8" in tiny_client.describe()
    assert tiny_client.activity().describe() == "The model is idle (it writes up to 8 answers together)."


def test_the_page_says_how_many_answers_the_model_writes_together(monkeypatch, tiny_model_dir):
    monkeypatch.setenv("DEMO_HF_MAX_BATCH", "3")
    with open_app(monkeypatch, tiny_model_dir) as at:
        captions = [caption.value for caption in at.caption]  # next to the model picker
        assert any(":material/groups: The model is idle (it writes up to 3 answers together)." in c for c in captions)
        assert any("batches of 3" in caption.value for caption in at.caption)


def test_a_lone_batched_reply_is_the_reply_generate_gives(tiny_client, queue_client):
    for i in range(3):
        assert outcome(tiny_client, question(i)) == outcome(queue_client, question(i))


def test_batched_logits_equal_each_rows_lone_logits(tiny_client):
    """Left padding masked and positions per row: a decode step over three prompts of different lengths gives each
    row the logits it gets alone."""
    model = tiny_client.model
    prompts = [tiny_client.template.render(question(i)).token_ids for i in (0, 2, 5)]
    nexts = [11, 12, 13]

    def tensor(values):  # on the model's device: DEMO_TEST_DEVICE=cuda runs this test on a GPU
        return torch.tensor(values, device=model.device)

    def prefill(ids):
        cache = DynamicCache(config=model.config)
        model(input_ids=tensor([ids]), attention_mask=tensor([[1] * len(ids)]),
              position_ids=tensor([list(range(len(ids)))]), past_key_values=cache, use_cache=True)
        return cache

    with torch.inference_mode():
        lone = []
        for ids, token in zip(prompts, nexts, strict=True):
            cache = prefill(ids)
            out = model(input_ids=tensor([[token]]), attention_mask=tensor([[1] * (len(ids) + 1)]),
                        position_ids=tensor([[len(ids)]]), past_key_values=cache, use_cache=True)
            lone.append(out.logits[0, -1])
        batch = BatchCache()
        for ids in prompts:
            batch.add(prefill(ids))
        assert batch.rows == 3 and batch.length == max(map(len, prompts))
        assert batch.mask.sum(dim=1).tolist() == [len(ids) for ids in prompts]
        out = model(input_ids=tensor([[t] for t in nexts]), attention_mask=batch.grow(),
                    position_ids=tensor([[len(ids)] for ids in prompts]), past_key_values=batch.cache,
                    use_cache=True)
        for row in range(3):
            torch.testing.assert_close(out.logits[row, -1], lone[row], atol=1e-5, rtol=1e-5)
        # The longest row leaves: the columns only it used are cut off.
        batch.keep([0, 1])
        assert batch.length == max(len(prompts[0]), len(prompts[1])) + 1
        assert batch.cache.layers[0].keys.shape[0] == 2 and batch.cache.layers[0].keys.shape[-2] == batch.length
        batch.keep([])
        assert batch.rows == 0 and batch.cache is None


def test_eight_concurrent_replies_each_equal_their_lone_reply(tiny_client):
    """Different prompt lengths and token limits, so replies join a running batch and leave it at different steps."""
    params = [GenerationParams(temperature=0.0, max_new_tokens=20 + 7 * i) for i in range(8)]
    alone = [outcome(tiny_client, question(i), params[i]) for i in range(8)]
    together = at_once([lambda i=i: outcome(tiny_client, question(i), params[i]) for i in range(8)], stagger_s=0.02)
    assert together == alone
    assert [reason for _, reason, _ in together] == ["length"] * 8
    assert [tokens for _, _, tokens in together] == [20 + 7 * i for i in range(8)]


def test_each_reply_keeps_its_own_sampling_settings_and_seed(tiny_client):
    settings = [GenerationParams(temperature=0.0, max_new_tokens=30),
                GenerationParams(temperature=1.2, top_p=0.8, max_new_tokens=30, seed=7),
                GenerationParams(temperature=0.7, top_k=5, max_new_tokens=30, seed=8, repetition_penalty=1.3),
                GenerationParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=30, seed=9)]
    alone = [outcome(tiny_client, question(1), p) for p in settings]
    assert len({text for text, _, _ in alone}) == 4  # the settings really differ
    together = at_once([lambda p=p: outcome(tiny_client, question(1), p) for p in settings])
    assert together == alone


def test_stop_ends_only_its_own_reply(tiny_client):
    long = GenerationParams(temperature=0.0, max_new_tokens=150)
    alone = [outcome(tiny_client, question(i), long) for i in range(3)]
    cancel = threading.Event()

    def stopped() -> tuple[str, str | None, int]:
        text, deltas = "", []
        for delta in tiny_client.stream(question(3), long, cancel):
            deltas.append(delta)
            if sum(d.metrics.completion_tokens > 0 for d in deltas) == 1:
                cancel.set()
        return text, deltas[-1].finish_reason, deltas[-1].metrics.completion_tokens

    *others, mine = at_once([*(lambda i=i: outcome(tiny_client, question(i), long) for i in range(3)), stopped])
    assert others == alone
    assert mine[1] == "cancelled" and mine[2] < 150


@pytest.fixture(scope="module")
def chunked_client(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir),
                                    device=TEST_DEVICE, hf_prefill_chunk=16))
    yield client
    client.close()


LONG = [{"role": "user", "content": "Please summarise: " + "the quick brown fox jumps over the lazy dog " * 60}]


def test_a_prompt_read_in_chunks_gives_the_answer_generate_gives(chunked_client, queue_client):
    assert len(chunked_client.template.render(LONG).token_ids) > 20 * 16
    reference = outcome(queue_client, LONG)
    assert outcome(chunked_client, LONG) == reference
    # ...also while other answers are written between its chunks.
    together = at_once([lambda: outcome(chunked_client, LONG), lambda: outcome(chunked_client, question(1)),
                        lambda: outcome(chunked_client, question(2))])
    assert together == [reference, outcome(queue_client, question(1)), outcome(queue_client, question(2))]


def test_stop_while_the_prompt_is_read_ends_it_there(chunked_client):
    cancel = threading.Event()
    huge = [{"role": "user", "content": "the quick brown fox jumps over the lazy dog " * 90}]
    # Stop pressed while the model reads the prompt's first chunk (of 50): on the model's own thread, so no thread
    # has to be scheduled within the tiny model's few milliseconds of reading.
    pressed = chunked_client.model.register_forward_pre_hook(lambda *_: cancel.set())
    try:
        text, deltas = collect(chunked_client, huge, GREEDY, cancel=cancel)
    finally:
        pressed.remove()
    assert deltas[-1].finish_reason == "cancelled" and deltas[-1].metrics.completion_tokens == 0
    deadline = time.monotonic() + 5
    while chunked_client.activity().generating and time.monotonic() < deadline:
        time.sleep(0.01)
    assert chunked_client.activity().describe().startswith("The model is idle")
    assert outcome(chunked_client, question(1))[1] == "length"  # and it goes on


def test_a_consumer_that_goes_away_leaves_the_batch(tiny_client):
    stream = tiny_client.stream(question(1), GenerationParams(temperature=0.0, max_new_tokens=400), threading.Event())
    next(d for d in stream if d.text)
    assert tiny_client.activity().generating == 1
    stream.close()
    deadline = time.monotonic() + 5
    while tiny_client.activity().generating and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tiny_client.activity().describe().startswith("The model is idle")


def test_forced_calls_and_json_replies_keep_their_grammar_inside_the_batch(tiny_client):
    tools = ToolRequest((CALCULATOR,), choice="calculator")
    sampled = [GenerationParams(temperature=1.0, max_new_tokens=3000, seed=seed) for seed in range(3)]
    jobs = [*(lambda p=p: collect(tiny_client, question(2), p, tools=tools) for p in sampled),
            *(lambda p=p: collect(tiny_client, question(3), p, response_format=ResponseFormat("json_schema", SHIRT))
              for p in sampled),
            lambda: outcome(tiny_client, question(4))]
    alone_free = outcome(tiny_client, question(4))
    results = at_once(jobs)
    for _, deltas in results[:3]:
        assert deltas[-1].finish_reason == "tool_calls"
        call = deltas[-1].tool_calls[0]
        assert call.name == "calculator" and isinstance(call.arguments["expression"], str)
    for text, _ in results[3:6]:
        jsonschema.validate(json.loads(text), SHIRT)
    assert results[6] == alone_free  # a free reply beside them is untouched by their grammars


def test_a_grammar_masks_its_own_row_of_a_column_major_batch_and_nothing_else(tiny_client):
    """The batched CPU head lays logits out column-major; xgrammar's CPU kernel ignores that stride, so a row sliced
    from the batch once got the wrong tokens masked and its neighbour row masked instead."""
    vocabulary = tiny_client.model.get_output_embeddings().weight.shape[0]
    allowed = tiny_client.tokenizer.encode("{", add_special_tokens=False)
    batch = torch.randn(vocabulary, 2).T  # [2, vocabulary], strides (1, 2): as weight @ hidden.T gives them
    neighbour = batch[1].clone()
    (grammar,) = tiny_client.grammar_processors('root ::= "{" [a-z]*')
    ids = torch.tensor([[1, 2, 3]])
    scores = grammar(ids, batch[0:1])
    finite = torch.isfinite(scores[0]).nonzero().flatten().tolist()
    assert allowed[0] in finite and 0 < len(finite) < vocabulary // 4
    assert torch.equal(batch[1], neighbour)  # the other reply's logits are untouched


def test_a_grammar_that_rejects_its_own_token_says_so(tiny_client):
    (grammar,) = tiny_client.grammar_processors('root ::= "{" [a-z]*')
    grammar(torch.tensor([[1, 2, 3]]), torch.zeros(1, tiny_client.model.get_output_embeddings().weight.shape[0]))
    brace = tiny_client.tokenizer.encode("}", add_special_tokens=False)[0]
    with pytest.raises(GrammarViolation, match="does not fit this reply's grammar"):
        grammar(torch.tensor([[1, 2, 3, brace]]), torch.zeros(1, 10))


def test_an_engine_failure_without_a_message_still_says_what_failed(tiny_model_dir, monkeypatch):
    """An empty AssertionError once reached the user as "Generation failed: " and nothing more."""
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE))

    def silent(self, token_ids, logits):
        raise AssertionError

    monkeypatch.setattr(TokenPicker, "pick", silent)
    with pytest.raises(ClientError) as failure:
        collect(client, question(1), GREEDY)
    assert str(failure.value) == "Generation failed: AssertionError (no message; the log has the details)"
    client.close()


def test_constrained_replies_hold_under_python_optimisations(tiny_model_dir):
    """`python -O` strips asserts: xgrammar's example processor advanced its matcher inside one, so there every
    constrained reply after its first token ignored the grammar."""
    script = f"""
import json, threading
from app.clients.client_protocol import GenerationParams, ResponseFormat
from app.clients.hf.hf_client import HFClient
from app.clients.hf.sampling import TokenPicker
from app.config import ModelSettings
client = HFClient(ModelSettings(dtype="float32", model_path={str(tiny_model_dir)!r}, device="cpu"))
for seed in range(3):
    deltas = client.stream([{{"role": "user", "content": "Hi"}}], GenerationParams(temperature=1.0, seed=seed,
                           max_new_tokens=3000), threading.Event(), None, ResponseFormat("json_schema", {SHIRT!r}))
    print(json.dumps("".join(d.text for d in deltas)))
client.close()
"""
    done = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]
    assert len(answers) == 3
    for answer in answers:
        jsonschema.validate(json.loads(answer), SHIRT)


def test_a_full_batch_makes_the_next_reply_wait_and_it_can_cancel_while_waiting(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir),
                                    device=TEST_DEVICE, hf_max_batch=2))
    release = threading.Event()
    started = threading.Barrier(3)

    def occupy() -> None:
        first = True
        for _ in client.stream(question(1), GenerationParams(temperature=0.0, max_new_tokens=2000), release):
            if first:
                first = False
                started.wait(10)
            release.wait(0.01)

    holders = [threading.Thread(target=occupy) for _ in range(2)]
    for holder in holders:
        holder.start()
    started.wait(10)
    activity = client.activity()
    assert (activity.generating, activity.waiting, activity.at_once) == (2, 0, 2)
    cancel = threading.Event()
    notices = []
    begun = time.monotonic()
    for delta in client.stream(question(2), GREEDY, cancel):
        if delta.notice:
            notices.append(delta.notice)
            assert client.activity().waiting == 1
            cancel.set()
        if delta.finish_reason:
            assert delta.finish_reason == "cancelled"
    assert notices and "Waiting" in notices[0] and "2 answers at once" in notices[0]
    assert time.monotonic() - begun < 5
    release.set()
    for holder in holders:
        holder.join(10)
    assert outcome(client, question(2)) == outcome(client, question(2))  # still serving
    client.close()


def test_unloading_the_model_ends_its_replies_with_a_clear_error(tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE))
    stream = client.stream(question(1), GenerationParams(temperature=0.0, max_new_tokens=3000), threading.Event())
    next(d for d in stream if d.text)
    closer = threading.Thread(target=client.close)
    closer.start()
    with pytest.raises(ClientError, match="unloaded"):
        for _ in stream:
            pass
    closer.join(10)
    with pytest.raises(ClientError, match="unloaded"):
        collect(client, question(1), GREEDY)


def test_a_vision_model_answers_one_after_another(tiny_vlm_client):
    assert tiny_vlm_client.decoder is None and tiny_vlm_client.activity().at_once == 1


@pytest.fixture(scope="module")
def smol_batch(smollm2_dir):
    # float32, stated: in bfloat16 a batched matrix product rounds a row differently from the row alone, so greedy
    # answers written together part from their lone answers after 2 to 40 tokens (still fluent); these tests check
    # that batching itself changes nothing, which float32 shows token for token.
    client = HFClient(ModelSettings(model_path=str(smollm2_dir), device=TEST_DEVICE, dtype="float32", hf_max_batch=8))
    yield client
    client.close()


def test_smollm2_eight_concurrent_greedy_answers_equal_their_lone_answers(smol_batch, record_property):
    """128 tokens each: batched float order may flip a near-tie now and then (the issue expects >= 7 of 8);
    a systematic fault (positions, padding, a mixed-up sampler) changes them all."""
    params = GenerationParams(temperature=0.0, max_new_tokens=128, ignore_eos=True)
    topics = ["a lighthouse", "a robot painter", "two bakers", "a lost dog", "Mars", "a shy dragon", "a detective",
              "a violin"]
    prompts = [[{"role": "user", "content": f"Write a story about {topic}."}] for topic in topics]
    alone = [outcome(smol_batch, p, params) for p in prompts]
    together = at_once([lambda p=p: outcome(smol_batch, p, params) for p in prompts])
    identical = sum(a == b for a, b in zip(alone, together, strict=True))
    record_property("identical_of_8", identical)
    print(f"SmolLM2: {identical} of 8 concurrent answers identical to their lone answers over 128 tokens")
    assert identical >= 7
    assert all(tokens == 128 for _, _, tokens in together)


def test_smollm2_constrained_and_free_replies_joining_and_leaving_the_batch_at_different_times(smol_batch):
    """Forced calls and JSON-schema replies, greedy and sampled, next to free replies, joining 0.15 s apart and
    ending at different lengths: every constrained reply parses and fits its schema (before the fix, each one that
    shared the batch failed with an empty "Generation failed: "), and the free replies are not bent by their
    neighbours' grammars."""
    # A bounded expression: with an unbounded string SmolLM2's forced call runs to the token limit, alone or not.
    bounded = {"type": "function", "function": {**CALCULATOR["function"], "parameters": {
        "type": "object", "required": ["expression"],
        "properties": {"expression": {"type": "string", "maxLength": 40}}}}}
    tools = ToolRequest((bounded,), choice="calculator")
    shirt = ResponseFormat("json_schema", SHIRT)
    story = [{"role": "user", "content": "Write a story about a lighthouse keeper."}]
    ask = [{"role": "user", "content": "What is 17 times 23?"}]
    stock = [{"role": "user", "content": "Is the red shirt in stock in size M? Answer in JSON."}]
    free = [GenerationParams(temperature=0.0, max_new_tokens=n, ignore_eos=True) for n in (48, 24)]
    alone = [outcome(smol_batch, story, p) for p in free]
    jobs = [
        lambda: outcome(smol_batch, story, free[0]),
        lambda: collect(smol_batch, ask, GenerationParams(temperature=0.0, max_new_tokens=200), tools=tools),
        lambda: collect(smol_batch, stock, GenerationParams(temperature=0.0, max_new_tokens=200),
                        response_format=shirt),
        lambda: outcome(smol_batch, story, free[1]),
        lambda: collect(smol_batch, ask, GenerationParams(temperature=1.0, seed=7, max_new_tokens=200), tools=tools),
        lambda: collect(smol_batch, stock, GenerationParams(temperature=1.0, seed=7, max_new_tokens=200),
                        response_format=shirt),
    ]
    results = at_once(jobs, stagger_s=0.15)
    for _, deltas in (results[1], results[4]):
        assert deltas[-1].finish_reason == "tool_calls"
        call = deltas[-1].tool_calls[0]
        assert call.name == "calculator" and isinstance(call.arguments["expression"], str)
    for text, deltas in (results[2], results[5]):
        assert deltas[-1].finish_reason == "stop"
        jsonschema.validate(json.loads(text), SHIRT)
    assert [results[0][2], results[3][2]] == [48, 24]
    assert results[0] == alone[0] and results[3] == alone[1]


def test_a_failure_outside_one_reply_fails_the_batch_and_the_decoder_goes_on(tiny_model_dir, monkeypatch):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE))

    def broken(self, rows):
        raise RuntimeError("device lost (simulated by the test)")

    with monkeypatch.context() as patched:
        patched.setattr(BatchCache, "keep", broken)  # runs when a reply leaves the batch, outside any reply's own try

        def failing() -> str:
            with pytest.raises(ClientError, match="device lost"):
                collect(client, question(2), GREEDY)
            return "failed"

        five = GenerationParams(temperature=0.0, max_new_tokens=5)
        short, long = at_once([lambda: outcome(client, question(1), five), failing])
        assert long == "failed"
    assert short[1] == "length"  # it had ended: its leaving broke the batch, which the other reply learns
    assert outcome(client, question(1))[1] == "length"
    client.close()


def test_a_client_that_is_dropped_stops_its_decoding_thread(tiny_model_dir):
    import gc
    import weakref

    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device=TEST_DEVICE))
    outcome(client, question(1))
    thread = client.decoder._thread
    decoder = weakref.ref(client.decoder)
    del client
    gc.collect()
    thread.join(10)
    assert not thread.is_alive() and decoder() is None


@pytest.mark.parametrize("change", ["min_p", "dynamic rope", "sliding window"])
def test_models_the_batched_decoder_would_change_answer_one_after_another(tiny_model_dir, change):
    from app.clients.hf.batch import can_batch

    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir),
                                    device=TEST_DEVICE, hf_max_batch=1))
    model = client.model
    assert can_batch(model)
    if change == "min_p":
        model.generation_config.min_p = 0.05  # generate() would apply it; the batched sampler does not
    elif change == "dynamic rope":
        model.config.rope_parameters = {**model.config.rope_parameters, "rope_type": "dynamic", "factor": 2.0}
    else:
        model.config.use_sliding_window, model.config.sliding_window = True, 64
        model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert not can_batch(model)
    client.close()
