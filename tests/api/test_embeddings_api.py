"""POST /v1/embeddings on our server with a sentence-embedding model (a tiny random one, saved as sentence-transformers
saves a real one and loaded as the app loads any), through the openai SDK (which asks for base64 by default),
langchain-openai, and the app's own remote embedder; what it cannot take is refused with why."""

from __future__ import annotations

import math
import time

import httpx
import openai
import pytest

from app.config import ServerSettings
from app.frontends.api.server_app import create_app
from app.knowledge.embeddings import (
    EmbeddingError,
    EmbeddingRefused,
    LocalEmbedder,
    RemoteEmbedder,
    embedder_from_env,
)
from harness.local_http import serving
from tests.fake_client import ScriptedClient
from tests.tiny_model import build_tiny_embedder

TEXTS = ["The keeper of the lighthouse was paid eleven shillings a week.",
         "How much was the lighthouse keeper paid?",
         "The bridge collapsed in the flood and was rebuilt in granite."]


@pytest.fixture(scope="module")
def tiny_embedder_folder(tmp_path_factory):
    return build_tiny_embedder(tmp_path_factory.mktemp("minilm"))


@pytest.fixture(scope="module")
def local(tiny_embedder_folder):
    return LocalEmbedder(tiny_embedder_folder, name="tiny-minilm")


@pytest.fixture(scope="module")
def base(local):
    with serving(create_app(ServerSettings(), client=ScriptedClient(), embedder=local)) as url:
        yield url


@pytest.fixture
def sdk(base):
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def close(first: list[float], second: list[float]) -> bool:
    return len(first) == len(second) and all(abs(a - b) < 1e-5 for a, b in zip(first, second, strict=True))


def test_the_openai_sdk_gets_the_model_s_own_vectors_in_order(sdk, local):
    expected = local.embed(TEXTS).vectors
    answer = sdk.embeddings.create(model="tiny-minilm", input=TEXTS)  # base64, the SDK's default, decoded by it
    assert answer.object == "list" and answer.model == "tiny-minilm"
    assert [item.index for item in answer.data] == [0, 1, 2]
    assert all(close(item.embedding, vector) for item, vector in zip(answer.data, expected, strict=True))
    assert all(abs(math.hypot(*item.embedding) - 1) < 1e-4 for item in answer.data)  # unit length
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 10
    as_floats = sdk.embeddings.create(model="tiny-minilm", input=TEXTS[0], encoding_format="float",
                                      dimensions=len(expected[0]))
    assert close(as_floats.data[0].embedding, expected[0])


def test_a_question_is_closer_to_the_passage_that_shares_its_words(local):
    document, question, other = local.embed(TEXTS).vectors
    query = local.embed([TEXTS[1]], "query").vectors[0]
    assert close(query, question)  # this model has no query prompt: a query is embedded as a document is

    def similarity(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))
    assert similarity(query, document) > similarity(query, other)


def test_langchain_and_the_app_s_remote_embedder_read_it_unchanged(base, local, monkeypatch):
    from langchain_openai import OpenAIEmbeddings

    chain = OpenAIEmbeddings(model="tiny-minilm", base_url=f"{base}/v1", api_key="none",
                             check_embedding_ctx_length=False)
    expected = local.embed(TEXTS).vectors
    assert all(close(got, want) for got, want in zip(chain.embed_documents(TEXTS), expected, strict=True))

    monkeypatch.setenv("DEMO_EMBEDDING_URL", f"{base}/v1")
    monkeypatch.setenv("DEMO_EMBEDDING_MODEL", "tiny-minilm")
    remote = embedder_from_env()
    assert isinstance(remote, RemoteEmbedder)
    embedded = remote.embed(TEXTS * 15)  # 45 texts: more than one request of 32
    assert len(embedded.vectors) == 45 and all(close(got, want) for got, want in zip(
        embedded.vectors, expected * 15, strict=True))
    assert embedded.tokens > 100


@pytest.mark.parametrize("body, status, says", [
    ({"model": "gpt-4o-embed", "input": "hi"}, 404, "embeds with 'tiny-minilm'"),
    ({"model": "tiny-minilm", "input": [[101, 2023, 102]]}, 400, "check_embedding_ctx_length=False"),
    ({"model": "tiny-minilm", "input": [1, 2, 3]}, 400, "token ids"),
    ({"model": "tiny-minilm", "input": []}, 400, "input is empty"),
    ({"model": "tiny-minilm", "input": ["fine", "  "]}, 400, "input[1] is empty"),
    ({"model": "tiny-minilm", "input": "pear " * 300}, 400, "more than 128 tokens, the most tiny-minilm reads"),
    ({"model": "tiny-minilm", "input": "pear" * 2_000_000}, 400, "8,000,000 characters, longer than"),
    ({"model": "m" * 201, "input": "hi"}, 422, "model"),
    ({"model": "tiny-minilm", "input": "hi", "dimensions": 8}, 400, "32 dimensions"),
    ({"model": "tiny-minilm", "input": ["hi"] * 2049}, 400, "at most 2048"),
    ({"model": "tiny-minilm", "input": "hi", "encoding_format": "int8"}, 422, "encoding_format"),
    ({"model": "tiny-minilm", "input": "hi", "truncate": True}, 422, "truncate"),
])
def test_what_it_cannot_take_is_refused_with_why(sdk, body, status, says):
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.post("/embeddings", body=body, cast_to=dict)
    assert refused.value.status_code == status and says in refused.value.message, refused.value.message


def test_a_lone_surrogate_is_refused_not_a_server_error(base):
    """Valid JSON (an escaped lone surrogate), but no text: the SDKs cannot even send it, a raw client can."""
    answer = httpx.post(f"{base}/v1/embeddings", headers={"Content-Type": "application/json"},
                        content=b'{"model": "tiny-minilm", "input": ["fine", "\\ud800abc"]}', timeout=30)
    assert answer.status_code == 400 and "input[1] is not valid Unicode text" in answer.json()["error"]["message"]


def test_odd_but_real_text_is_embedded(sdk):
    answer = sdk.embeddings.create(model="tiny-minilm", input=["\u200b", "e\u0301\u0301", "🍐" * 10],
                                   encoding_format="float")
    assert len(answer.data) == 3 and all(len(item.embedding) == 32 for item in answer.data)


def test_a_busy_model_never_holds_up_the_rest_of_the_server(tiny_embedder_folder):
    """Embedding requests wait for the model without taking the thread pool chat shares: with the model stuck,
    45 of them queue (those past the queue get a 429) and a chat completion is still answered."""
    import threading

    from tests.fake_client import text_reply

    release = threading.Event()

    class Stuck(LocalEmbedder):
        def embed(self, texts, kind="document"):
            release.wait(60)
            return super().embed(texts, kind)

    stuck = Stuck(tiny_embedder_folder, name="tiny-minilm")
    client = ScriptedClient([text_reply("Still here.")])
    with serving(create_app(ServerSettings(), client=client, embedder=stuck)) as url:
        statuses: list[int] = []

        def embed() -> None:
            statuses.append(httpx.post(f"{url}/v1/embeddings", json={"model": "tiny-minilm", "input": "hi"},
                                       timeout=90).status_code)
        senders = [threading.Thread(target=embed) for _ in range(45)]
        for sender in senders:
            sender.start()
        deadline = time.monotonic() + 60  # all 45 in: 32 held by the stuck model, the other 13 told to come back
        while statuses.count(429) < 45 - 32:
            assert time.monotonic() < deadline, statuses
            time.sleep(0.05)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=20)
        reply = sdk.chat.completions.create(model="scripted-model", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Still here."  # answered while the model is stuck
        release.set()
        for sender in senders:
            sender.join(90)
    assert sorted(set(statuses)) == [200, 429] and statuses.count(200) >= 32


def test_a_damaged_model_folder_is_a_503_that_names_no_path(tmp_path, tiny_embedder_folder, monkeypatch):
    import shutil

    broken = tmp_path / "broken-minilm"
    shutil.copytree(tiny_embedder_folder, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    monkeypatch.setenv("DEMO_EMBEDDING_MODEL", str(broken))
    monkeypatch.delenv("DEMO_EMBEDDING_URL", raising=False)
    with serving(create_app(ServerSettings(), client=ScriptedClient())) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.InternalServerError) as refused:
            sdk.embeddings.create(model="broken-minilm", input="hi")
    assert refused.value.status_code == 503 and "broken-minilm could not be loaded" in refused.value.message
    assert str(tmp_path) not in refused.value.message


def test_a_remote_server_s_refusal_is_the_texts_fault(base):
    remote = RemoteEmbedder(f"{base}/v1", "tiny-minilm")
    with pytest.raises(EmbeddingRefused, match="more than 128 tokens"):
        remote.embed(["pear " * 300])
    with pytest.raises(EmbeddingError, match="answered 404"):
        RemoteEmbedder(f"{base}/v1", "another-model").embed(["hi"])


def test_without_an_embedding_model_it_says_how_to_add_one_and_the_rest_works(monkeypatch, tmp_path):
    monkeypatch.delenv("DEMO_EMBEDDING_MODEL", raising=False)
    monkeypatch.delenv("DEMO_EMBEDDING_URL", raising=False)
    with serving(create_app(ServerSettings(), client=ScriptedClient())) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="DEMO_EMBEDDING_MODEL"):
            sdk.embeddings.create(model="anything", input="hi")
    monkeypatch.setenv("DEMO_EMBEDDING_MODEL", str(tmp_path / "no-such-model"))
    with serving(create_app(ServerSettings(), client=ScriptedClient())) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        for _ in range(2):  # tried again each time, and said each time
            with pytest.raises(openai.InternalServerError) as refused:
                sdk.embeddings.create(model="no-such-model", input="hi")
            assert refused.value.status_code == 503 and "neither a folder nor a model in the Hugging Face cache" \
                in refused.value.message
        assert sdk.models.list().data[0].id == "scripted-model"  # the server itself is up
