"""Property-based API testing of our server with schemathesis: generated requests from /openapi.json, sent over
HTTP to a real server on 127.0.0.1 (tiny model, so generations are quick): never a 5xx, never off-schema, and
the 200 answers validated against the declared response models (`openai.types`' ChatCompletion, Response and
Completion). Requests that break the schema on purpose (negative mode) must be refused with a 4xx in OpenAI's error
shape."""

from __future__ import annotations

import zlib

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from app.config import ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import serving


@pytest.fixture(scope="module")
def tiny_api(tiny_client):
    with serving(create_app(ServerSettings(served_name="tiny", default_max_tokens=16), client=tiny_client)) as base:
        yield base


# Files and vector stores are checked apart: sharing the 400 examples with them, the generating routes got too few.
KNOWLEDGE_PATHS = r"^/v1/(files|vector_stores)"


def test_generated_requests_never_break_the_server(tiny_api):
    schema = schemathesis.openapi.from_url(f"{tiny_api}/openapi.json").exclude(path_regex=KNOWLEDGE_PATHS)
    answered: dict[str, list[int]] = {}  # statuses of the answers in JSON, by path

    # derandomize: the same requests on every run, so that a count below is a fact about the server, not luck.
    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(case=schema.as_strategy())
    def check(case):
        if isinstance(case.body, dict):
            # Keep generations short: the property is about request handling, not long answers.
            for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
                if isinstance(case.body.get(key), int):
                    case.body[key] = min(case.body[key], 8)
            if "messages" in case.body:
                # A random model name is always a 404: name ours. A third of the requests keep what was generated;
                # a third get valid messages; a third valid messages and no tools or response format, so that many
                # get as far as generating and their 200 bodies are validated against the schema.
                case.body["model"] = "tiny"
                share = zlib.crc32(repr(case.body).encode()) % 3
                if share:
                    case.body["messages"] = [{"role": "user", "content": "hi"}]
                if share == 2:
                    for key in ("tools", "tool_choice", "response_format", "functions", "function_call"):
                        case.body.pop(key, None)
            elif case.path == "/v1/completions":  # likewise: our model, and half with a plain prompt
                case.body["model"] = "tiny"
                if zlib.crc32(repr(case.body).encode()) % 2:
                    case.body["prompt"] = "hi"
                    for key in ("suffix", "n", "best_of", "logprobs", "echo", "frequency_penalty",
                                "presence_penalty"):
                        case.body.pop(key, None)
            elif case.path == "/v1/responses":  # likewise: our model, and a third with plain input
                case.body["model"] = "tiny"
                # Without max_output_tokens an answer may fill the context window (agents need that): 45 s here.
                case.body.setdefault("max_output_tokens", 8)
                share = zlib.crc32(repr(case.body).encode()) % 3
                if share:
                    case.body["input"] = "hi"
                if share == 2:
                    for key in ("tools", "tool_choice", "text", "previous_response_id"):
                        case.body.pop(key, None)
        # Every check but "a schema-valid request is accepted": some rules cannot be said in JSON Schema (messages
        # that make a conversation, a tool_choice naming one of the tools, arguments that are JSON text), and those
        # requests rightly get a 400 in OpenAI's error shape.
        response = case.call_and_validate(base_url=tiny_api, timeout=60, excluded_checks=[positive_data_acceptance])
        if "application/json" in response.headers.get("content-type", []):
            answered.setdefault(case.path, []).append(response.status_code)

    check()
    # 200 bodies were really checked against ChatCompletion and Response
    assert answered["/v1/chat/completions"].count(200) >= 5, answered
    assert answered["/v1/responses"].count(200) >= 5, answered
    assert answered["/v1/completions"].count(200) >= 5, answered


def test_requests_that_break_the_schema_get_a_clear_4xx(tiny_api):
    schema = schemathesis.openapi.from_url(f"{tiny_api}/openapi.json")
    refused: list[int] = []  # statuses of the chat completions refused

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    def check(case):
        response = case.call(base_url=tiny_api, timeout=60)
        assert response.status_code < 500, (case.body, response.text[:500])
        if case.path == "/v1/chat/completions" and response.status_code >= 400:
            error = response.json()["error"]  # OpenAI's shape, which the SDKs turn into typed errors
            assert error["message"] and error["type"] and "Traceback" not in error["message"]
            refused.append(response.status_code)

    check()
    assert len(refused) >= 10, refused  # the chat completions really were sent broken requests


def test_generated_file_and_vector_store_requests_never_break_the_server(tiny_api):
    """The same for /v1/files and /v1/vector_stores (uploads, stores, their files, search), on the tests' database:
    never a 5xx, never off-schema, refusals in OpenAI's error shape."""
    schema = schemathesis.openapi.from_url(f"{tiny_api}/openapi.json").include(path_regex=KNOWLEDGE_PATHS)
    answered: dict[str, list[int]] = {}

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(case=schema.as_strategy())
    def check(case):
        response = case.call_and_validate(base_url=tiny_api, timeout=60, excluded_checks=[positive_data_acceptance])
        answered.setdefault(case.path, []).append(response.status_code)

    check()
    assert answered["/v1/vector_stores"].count(200) >= 5, answered  # stores were made, and their answers checked
    assert len(answered) >= 8, answered
