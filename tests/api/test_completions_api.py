"""POST /v1/completions (legacy text completions) on our server on 127.0.0.1, driven by the official `openai` SDK:
SmolLM2 continuing raw prompts, a tiny model with StarCoder's FIM tokens filling in the middle, a scripted client
for what needs exact replies, and the app's OpenAI backend forwarding to the endpoint."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from app.clients.client_protocol import ClientError, Delta, GenerationParams
from app.clients.hf.hf_client import HFClient
from app.clients.openai import OpenAIClient
from app.clients.raw_prompt import raw_prompt_ids
from app.config import ModelSettings, RequestLimits, ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import serving
from tests.fake_client import ScriptedClient, text_reply
from tests.tiny_model import build_tiny_model

MODEL = "SmolLM2-135M-Instruct"
FIM_MODEL = "tiny-fim"
PARIS = "The capital of France is"
GREEDY = {"temperature": 0, "seed": 0}
HEADERS = {"Authorization": "Bearer secret-key"}


@pytest.fixture(scope="module")
def api(smol_client):
    with serving(create_app(ServerSettings(api_key="secret-key"), client=smol_client)) as base:
        yield base


@pytest.fixture
def sdk(api):
    return openai.OpenAI(base_url=f"{api}/v1", api_key="secret-key", max_retries=0)


class RecordingHFClient(HFClient):
    """The transformers client, keeping the token ids of every prompt its engine was handed."""

    def __init__(self, settings: ModelSettings) -> None:
        super().__init__(settings)
        self.seen: list[list[int]] = []

    def engine_request(self, prompt, cancel):
        self.seen.append(list(prompt.token_ids))
        return super().engine_request(prompt, cancel)


@pytest.fixture(scope="module")
def fim_client(tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-fim") / FIM_MODEL, fim=True)
    return RecordingHFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu",
                                           max_context_tokens=64))


@pytest.fixture(scope="module")
def fim_sdk(fim_client):
    with serving(create_app(ServerSettings(), client=fim_client)) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def _metric(api: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(httpx.get(f"{api}/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


# ----- SmolLM2: raw continuations ---------------------------------------------------------------------------------

def test_a_prompt_is_continued_whole_and_streamed_alike(sdk, smol_client):
    reply = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=6, **GREEDY)
    choice = reply.choices[0]
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-") and reply.model == MODEL
    assert choice.index == 0 and choice.text.startswith(" Paris") and choice.finish_reason == "length"
    prompt_tokens = len(smol_client.tokenizer(PARIS)["input_ids"])  # raw: no chat template around it
    usage = reply.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (prompt_tokens, 6, prompt_tokens + 6)
    assert usage.prompt_tokens_details.cached_tokens is not None

    chunks = list(sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=6, stream=True,
                                         stream_options={"include_usage": True}, **GREEDY))
    pieces = [c.choices[0] for c in chunks if c.choices]
    assert all(c.object == "text_completion" and c.id == chunks[0].id for c in chunks)
    assert len(pieces) > 2 and "".join(p.text for p in pieces) == choice.text  # deterministic, and streamed
    assert [p.finish_reason for p in pieces] == [None] * (len(pieces) - 1) + ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens == prompt_tokens


def test_echo_puts_the_prompt_before_the_text(sdk):
    plain = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=3, **GREEDY).choices[0].text
    echoed = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=3, echo=True, **GREEDY)
    assert echoed.choices[0].text == PARIS + plain
    chunks = list(sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=3, echo=True, stream=True, **GREEDY))
    assert chunks[0].choices[0].text == PARIS
    assert "".join(c.choices[0].text for c in chunks) == PARIS + plain


def test_a_stop_string_ends_the_text_before_it(sdk):
    # Greedy SmolLM2 writes " Paris.\n\nThe answer is: ..." after PARIS.
    for stream in (False, True):
        answer = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=12, stop=["."], stream=stream, **GREEDY)
        chunks = list(answer) if stream else [answer]
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == " Paris" and chunks[-1].choices[0].finish_reason == "stop"


def test_max_tokens_cuts_the_text_with_finish_reason_length(sdk):
    reply = sdk.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=2, **GREEDY)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 2


def test_a_prompt_of_token_ids_is_continued_as_its_text(sdk, smol_client):
    ids = smol_client.tokenizer(PARIS)["input_ids"]
    by_ids = sdk.completions.create(model=MODEL, prompt=ids, max_tokens=4, **GREEDY)
    by_text = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=4, **GREEDY)
    assert by_ids.choices[0].text == by_text.choices[0].text and by_ids.usage.prompt_tokens == len(ids)


def test_two_prompts_are_two_choices_each_as_alone(sdk, api):
    prompts = [PARIS, "def add(a, b):\n"]
    recorded = _metric(api, "demo_chat_completions_total", finish_reason="length")
    alone = [sdk.completions.create(model=MODEL, prompt=p, max_tokens=4, **GREEDY) for p in prompts]
    together = sdk.completions.create(model=MODEL, prompt=prompts, max_tokens=4, **GREEDY)
    assert [c.index for c in together.choices] == [0, 1]
    assert [c.text for c in together.choices] == [a.choices[0].text for a in alone]
    assert together.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert together.usage.completion_tokens == 8 == together.usage.total_tokens - together.usage.prompt_tokens
    assert _metric(api, "demo_chat_completions_total", finish_reason="length") == recorded + 4  # each recorded

    chunks = list(sdk.completions.create(model=MODEL, prompt=prompts, max_tokens=4, stream=True, **GREEDY))
    for choice in together.choices:
        own = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
        assert "".join(p.text for p in own) == choice.text and own[-1].finish_reason == "length"


def test_a_suffix_on_a_model_without_fim_tokens_is_refused(sdk):
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.completions.create(model=MODEL, prompt="def add(a, b):\n", suffix="\n    return c", max_tokens=4)
    message = raised.value.body["message"]
    assert "cannot fill in the middle" in message and "<fim_prefix>" in message  # what it looked for


@pytest.mark.parametrize(
    "kwargs, error, status, words",
    [
        ({"model": "gpt-99"}, openai.NotFoundError, 404, "does not exist"),
        ({"n": 2}, openai.BadRequestError, 400, "n > 1"),
        ({"best_of": 3}, openai.BadRequestError, 400, "best_of"),
        ({"logprobs": 1}, openai.BadRequestError, 400, "logprobs"),
        ({"presence_penalty": 0.5}, openai.BadRequestError, 400, "presence_penalty"),
        ({"extra_body": {"logit_bias": {"1": 5}}}, openai.BadRequestError, 400, "logit_bias"),
        ({"prompt": [1, 2], "echo": True}, openai.BadRequestError, 400, "echo"),
        ({"prompt": []}, openai.BadRequestError, 400, "empty"),
        ({"stop": [""]}, openai.BadRequestError, 400, "stop"),
        ({"temperature": 7}, openai.UnprocessableEntityError, 422, "temperature"),
        ({"prompt": [-1]}, openai.UnprocessableEntityError, 422, "prompt"),
        ({"prompt": [10**9]}, openai.BadRequestError, 400, "vocabulary"),
    ],
)
def test_errors_in_openai_shape(sdk, kwargs, error, status, words):
    with pytest.raises(error) as raised:
        sdk.completions.create(**{"model": MODEL, "prompt": "hi", "max_tokens": 2, **kwargs})
    assert raised.value.status_code == status and words in raised.value.body["message"]


def test_a_client_that_disconnects_cancels_every_generation(api):
    cancelled = _metric(api, "demo_chat_completions_total", finish_reason="cancelled")
    body = {"model": MODEL, "stream": True, "max_tokens": 400, "temperature": 0, "ignore_eos": True,
            "prompt": ["Once upon a time", "The lighthouse keeper"]}
    with httpx.stream("POST", f"{api}/v1/completions", json=body, headers=HEADERS, timeout=60) as response:
        assert next(line for line in response.iter_lines() if line.startswith("data: ")).startswith('data: {"id"')
    deadline = time.monotonic() + 5
    while _metric(api, "demo_chat_completions_total", finish_reason="cancelled") < cancelled + 2 or \
            _metric(api, "demo_chat_requests_in_progress") != 0:  # down once each generation has stopped
        assert time.monotonic() < deadline, "the generations went on after the client left"
        time.sleep(0.05)


def test_the_openapi_document_describes_the_endpoint(api):
    operation = httpx.get(f"{api}/openapi.json", headers=HEADERS).json()["paths"]["/v1/completions"]["post"]
    answers = operation["responses"]
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Completion")
    assert "text/event-stream" in answers["200"]["content"]
    assert {"400", "401", "404", "413", "422", "503"} <= set(answers)
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/CompletionRequest")


def test_the_apps_openai_backend_completes_through_this_server(api, sdk):
    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{api}/v1", api_key="secret-key"))
    # As the SDK's request below: the sampling fields not chosen are the server's (its model's defaults).
    params = GenerationParams(temperature=0.0, seed=0, max_new_tokens=5,
                              server_defaults={"top_p", "top_k", "repetition_penalty"})
    deltas = list(client.complete(PARIS, params, threading.Event()))
    direct = sdk.completions.create(model=MODEL, prompt=PARIS, max_tokens=5, **GREEDY)
    assert "".join(d.text for d in deltas) == direct.choices[0].text and deltas[-1].finish_reason == "length"
    metrics = deltas[-1].metrics  # the server's usage, from the stream's last chunk
    assert (metrics.prompt_tokens, metrics.completion_tokens) == (direct.usage.prompt_tokens, 5)
    stopped = list(client.complete(PARIS, GenerationParams(temperature=0.0, max_new_tokens=12, stop=(".",)),
                                   threading.Event()))
    assert "".join(d.text for d in stopped) == " Paris" and stopped[-1].finish_reason == "stop"
    with pytest.raises(ClientError, match="HTTP 400: .*cannot fill in the middle"):
        list(client.complete(PARIS, params, threading.Event(), suffix=" and more"))


# ----- fill in the middle: a tiny model with StarCoder's FIM tokens -----------------------------------------------

@pytest.mark.model  # the tiny FIM model is built by a fixture of this module
def test_a_suffix_fills_in_the_middle_prefix_suffix_middle(fim_sdk, fim_client):
    prefix, suffix = "def add(a, b):\n", "\n    return c\n"
    reply = fim_sdk.completions.create(model=FIM_MODEL, prompt=prefix, suffix=suffix, max_tokens=5, temperature=0)
    seen = fim_client.seen[-1]
    assert fim_client.tokenizer.decode(seen) == f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
    assert reply.usage.prompt_tokens == len(seen) and reply.usage.completion_tokens == 5
    assert reply.choices[0].finish_reason == "length" and reply.choices[0].text

    # Token ids are the prefix as they are; the FIM tokens go around them.
    ids = fim_client.tokenizer(prefix)["input_ids"]
    chunks = list(fim_sdk.completions.create(model=FIM_MODEL, prompt=ids, suffix=suffix, max_tokens=5, temperature=0,
                                             stream=True))
    assert fim_client.seen[-1] == seen
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text


@pytest.mark.model  # the tiny FIM model is built by a fixture of this module
def test_a_prompt_is_refused_when_it_leaves_no_room_and_cut_when_little(fim_sdk, fim_client):
    # max_context_tokens=64: a prompt of 64 tokens leaves none, one of 60 leaves 4.
    token = fim_client.tokenizer("Paris")["input_ids"][0]
    with pytest.raises(openai.BadRequestError, match="64-token context window"):
        fim_sdk.completions.create(model=FIM_MODEL, prompt=[token] * 64, max_tokens=5)
    reply = fim_sdk.completions.create(model=FIM_MODEL, prompt=[token] * 60, max_tokens=16, temperature=0)
    assert reply.usage.completion_tokens == 4 and reply.choices[0].finish_reason == "length"


@pytest.mark.parametrize("tokens", [("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
                                    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")])
def test_qwen_and_deepseek_coder_fim_tokens_are_known(tiny_model_dir, tokens):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ClientError, match="cannot fill in the middle"):
        raw_prompt_ids(tokenizer, "a = ", "\nb = a")
    assert raw_prompt_ids(tokenizer, "a = ", "") == tokenizer("a = ")["input_ids"]  # nothing after the gap: plain
    tokenizer.add_tokens(list(tokens), special_tokens=True)
    ids = raw_prompt_ids(tokenizer, "a = ", "\nb = a")
    assert tokenizer.decode(ids) == f"{tokens[0]}a = {tokens[1]}\nb = a{tokens[2]}"
    assert raw_prompt_ids(tokenizer, "a = ") == tokenizer("a = ")["input_ids"]  # no suffix: a plain prompt


# ----- a scripted client: exact replies, limits ------------------------------------------------------------------

def test_each_prompt_gets_its_own_generation_and_the_limits_hold():
    client = ScriptedClient([text_reply("A", "B"), text_reply("C", finish="length")])
    settings = ServerSettings(limits=RequestLimits(max_messages=2, max_chars=20))
    with serving(create_app(settings, client=client)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        reply = sdk.completions.create(model="scripted-model", prompt=["one", "two"], suffix="!", stop="x",
                                       max_tokens=7, temperature=0.5)
        assert [(c.index, c.text, c.finish_reason) for c in reply.choices] == [(0, "AB", "stop"), (1, "C", "length")]
        assert [(r.prompt, r.suffix, r.params.stop, r.params.max_new_tokens, r.params.temperature)
                for r in client.requests] == [("one", "!", ("x",), 7, 0.5), ("two", "!", ("x",), 7, 0.5)]
        assert reply.usage.completion_tokens == 3
        with pytest.raises(openai.APIStatusError, match="at most 2 per request") as many:
            sdk.completions.create(model="scripted-model", prompt=["a", "b", "c"])
        with pytest.raises(openai.APIStatusError, match="at most 20 per request") as long:
            sdk.completions.create(model="scripted-model", prompt="x" * 21)
        assert many.value.status_code == long.value.status_code == 413
        assert len(client.requests) == 2  # refused before any generation


class FifoEngineClient(ScriptedClient):
    """A model that writes `capacity` answers at once while the others wait in arrival order, as the HF batcher
    and llama.cpp's slots do: each answer is `tokens` pieces, `step_s` apart. It records which prompts ran
    together."""

    def __init__(self, capacity: int, tokens: int, step_s: float) -> None:
        super().__init__()
        self.capacity, self.tokens, self.step_s = capacity, tokens, step_s
        self._turns = threading.Condition()
        self._waiting: list[object] = []
        self.running: list[str] = []
        self.most_running: dict[str, int] = {}  # by the prompt's first word: the most that ran together
        self.finished: list[str] = []

    def complete(self, prompt, params, cancel, suffix=None):
        ticket, tag = object(), str(prompt).split()[0]
        with self._turns:
            self._waiting.append(ticket)
            while not (self._waiting[0] is ticket and len(self.running) < self.capacity):
                if cancel.is_set():
                    self._waiting.remove(ticket)
                    self._turns.notify_all()
                    return
                self._turns.wait(0.05)
            self._waiting.pop(0)
            self.running.append(tag)
            self.most_running[tag] = max(self.most_running.get(tag, 0), self.running.count(tag))
            self._turns.notify_all()
        try:
            for _ in range(self.tokens):
                if cancel.is_set():
                    break
                time.sleep(self.step_s)
                yield Delta(text=".")
            yield Delta(finish_reason="length")
        finally:
            with self._turns:
                self.running.remove(tag)
                self.finished.append(tag)
                self._turns.notify_all()


def test_one_requests_prompts_take_a_bounded_share_while_another_client_is_served():
    """The finding: one completion of 400 prompts took another client's first token from 3.7 s to over 180 s, with
    up to 408 server threads: every prompt was queued in the engine at once, ahead of everyone else. Now at most
    prompts_at_once of a request's prompts run (a thread each); the others wait without a thread."""
    engine = FifoEngineClient(capacity=3, tokens=4, step_s=0.03)
    settings = ServerSettings(limits=RequestLimits(prompts_at_once=2))
    threads: list[int] = []
    with serving(create_app(settings, client=engine)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)
        bulk: dict[str, object] = {}

        def send_bulk() -> None:
            bulk["reply"] = sdk.completions.create(model="scripted-model", prompt=[f"bulk {n}" for n in range(40)],
                                                   max_tokens=4)

        sender = threading.Thread(target=send_bulk)
        sender.start()
        deadline = time.monotonic() + 30
        while not engine.running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        threads.append(threading.active_count())
        with sdk.completions.create(model="scripted-model", prompt="other", max_tokens=4, stream=True) as stream:
            texts = [chunk.choices[0].text for chunk in stream if chunk.choices]
        threads.append(threading.active_count())
        bulk_done_when_other_done = engine.finished.count("bulk")
        sender.join(timeout=60)
    assert "".join(texts) == "...."
    assert engine.most_running["bulk"] == 2  # its share, though the engine had room for 3
    assert bulk_done_when_other_done < 40  # the other client was served beside the bulk, not after it
    reply = bulk["reply"]
    assert [choice.index for choice in reply.choices] == list(range(40))
    assert all(choice.text == "...." and choice.finish_reason == "length" for choice in reply.choices)
    assert max(threads) < 40  # a thread per running prompt, not per prompt


def test_a_client_that_leaves_stops_its_waiting_prompts_too():
    engine = FifoEngineClient(capacity=4, tokens=50, step_s=0.05)
    settings = ServerSettings(limits=RequestLimits(prompts_at_once=2))
    with serving(create_app(settings, client=engine)) as base:
        body = {"model": "scripted-model", "prompt": [f"bulk {n}" for n in range(20)], "max_tokens": 50,
                "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=30) as response:
            next(line for line in response.iter_lines() if line.startswith("data:"))
        deadline = time.monotonic() + 10
        while engine.running:  # both running prompts are cancelled, and none of the waiting ones starts
            assert time.monotonic() < deadline, engine.running
            time.sleep(0.05)
        time.sleep(0.5)
        assert not engine.running and len(engine.finished) == 2


def test_with_a_key_the_api_description_needs_it_and_health_and_metrics_stay_open():
    """The finding: /docs and /openapi.json were open on a server with an API key. They describe every route and
    limit, so they now need the key; /health and /metrics stay open for probes and Prometheus, and hold no
    request's content."""
    with serving(create_app(ServerSettings(api_key="secret-key"), client=ScriptedClient())) as base:
        for path in ("/openapi.json", "/docs", "/redoc"):
            refused = httpx.get(f"{base}{path}", timeout=60)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", path
            assert httpx.get(f"{base}{path}", headers=HEADERS, timeout=60).status_code == 200, path
        assert httpx.get(f"{base}/metrics").status_code == 200 and "secret-key" not in httpx.get(
            f"{base}/metrics").text
        assert httpx.get(f"{base}/health").status_code == 200
    with serving(create_app(ServerSettings(), client=ScriptedClient())) as base:  # no key: all open, as before
        assert httpx.get(f"{base}/openapi.json", timeout=60).status_code == 200
