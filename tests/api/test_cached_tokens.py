"""usage.prompt_tokens_details.cached_tokens on chat completions: the real count of prompt tokens the HF backend's
prompt cache held, whole and in a stream's usage chunk, through the server on 127.0.0.1 and the openai SDK."""

from __future__ import annotations

import uuid

import openai
import pytest

from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import serving


@pytest.fixture(scope="module", params=[8, 1], ids=["batched", "generate"])
def served(request, tiny_model_dir):
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device="cpu",
                                    hf_max_batch=request.param))
    with serving(create_app(ServerSettings(), client=client)) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0), client.capabilities.model_id
    client.close()


def test_the_same_long_prompt_again_reports_its_cached_tokens_whole_and_streamed(served):
    sdk, model = served
    # Unique, so no earlier request of the session shares its start; long, so most of it can come from the cache.
    messages = [{"role": "user", "content": f"Request {uuid.uuid4().hex}. " + "Tell me about Paris and Berlin. " * 20}]
    first = sdk.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=4).usage
    assert first.prompt_tokens > 100 and first.prompt_tokens_details.cached_tokens == 0
    again = sdk.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=4).usage
    # All but the last prompt token, which is read again to predict the first answer token.
    assert again.prompt_tokens == first.prompt_tokens
    assert again.prompt_tokens_details.cached_tokens == again.prompt_tokens - 1
    chunks = list(sdk.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=4,
                                              stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1
