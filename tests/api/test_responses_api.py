"""POST /v1/responses and the stored responses, through a real server on 127.0.0.1 and the real openai SDK's
`responses` (create, stream, retrieve, delete, input_items), on SmolLM2 and a scripted reasoning model."""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import openai
import pytest
from sqlalchemy import text

from app.clients.client_protocol import Delta
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings, RequestLimits, ServerSettings
from app.frontends.api.server_app import create_app
from app.storage import open_database
from app.storage.responses import ResponseStore
from harness.local_http import serving
from tests.api.test_server import _metric
from tests.helpers import at_once
from tests.tiny_model import build_scripted_model

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
           "strict": True}
SEEDED = {"temperature": 0.0, "extra_body": {"seed": 1}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ResponseStore(open_database(f"sqlite:///{tmp_path_factory.mktemp('responses')}/api.db"))


@pytest.fixture(scope="module")
def api(smol_client, store):
    with serving(create_app(ServerSettings(api_key="secret-key"), client=smol_client, response_store=store)) as base:
        yield base


@pytest.fixture
def sdk(api):
    return openai.OpenAI(base_url=f"{api}/v1", api_key="secret-key", max_retries=0)


def test_a_whole_response_with_its_usage(sdk):
    response = sdk.responses.create(model=MODEL, input="Say hello in one short sentence.", max_output_tokens=40,
                                    **SEEDED)
    assert response.id.startswith("resp_") and response.object == "response" and response.model == MODEL
    assert response.status == "completed" and response.error is None and response.incomplete_details is None
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.output_text.strip() and response.output_text == message.content[0].text
    usage = response.usage
    assert usage.input_tokens > 5 and 0 < usage.output_tokens <= 40
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens >= 0


def test_a_repeated_prompt_reports_its_cached_tokens(sdk):
    instructions = "You are a careful assistant. " * 40
    first = sdk.responses.create(model=MODEL, instructions=instructions, input="Hi", max_output_tokens=3)
    second = sdk.responses.create(model=MODEL, instructions=instructions, input="Hello", max_output_tokens=3)
    assert second.usage.input_tokens_details.cached_tokens > first.usage.input_tokens // 2


def test_a_stream_is_the_typed_event_sequence_in_order(sdk):
    with sdk.responses.stream(model=MODEL, input="Name three colours.", max_output_tokens=30, **SEEDED) as stream:
        events = list(stream)
    final = events[-1].response  # get_final_response() takes only response.completed, as OpenAI's API sends it
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          kinds[-1]] and kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) > 3 and "".join(deltas) == final.output_text
    assert events[0].response.status == "in_progress" and events[0].response.id == final.id
    assert final.usage.output_tokens == 30 if final.status == "incomplete" else final.usage.output_tokens <= 30


def test_two_streams_at_once_each_keep_their_own_sequence(sdk):
    finals: dict[int, list] = {}

    def stream(worker: int) -> None:
        with sdk.responses.stream(model=MODEL, input=["Name a fruit.", "Name a river."][worker],
                                  max_output_tokens=24, **SEEDED) as events:
            finals[worker] = list(events)

    assert at_once(2, stream) == []
    first, second = finals[0], finals[1]
    assert first[-1].response.id != second[-1].response.id
    for events in (first, second):
        assert [event.sequence_number for event in events] == list(range(len(events)))
        assert {event.response.id for event in events if hasattr(event, "response")} == {events[-1].response.id}


def test_a_client_that_leaves_mid_stream_cancels_its_generation(api):
    cancelled = _metric(api, "demo_chat_completions_total", finish_reason="cancelled")
    body = {"model": MODEL, "stream": True, "max_output_tokens": 400, "temperature": 0,
            "input": "Write a long story about a lighthouse."}
    with httpx.stream("POST", f"{api}/v1/responses", json=body, headers={"Authorization": "Bearer secret-key"},
                      timeout=60) as response:  # httpx's 5 s default: CI's loaded machine took longer to start
        lines = response.iter_lines()
        assert next(line for line in lines if "response.output_text.delta" in line)
    deadline = time.monotonic() + 3
    while _metric(api, "demo_chat_completions_total", finish_reason="cancelled") == cancelled or \
            _metric(api, "demo_chat_requests_in_progress") != 0:  # down once the generation has stopped
        assert time.monotonic() < deadline, "the generation went on after the client left"
        time.sleep(0.05)


def test_a_function_call_and_its_output_round_trip(sdk):
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = sdk.responses.create(model=MODEL, input=asked, tools=[WEATHER], tool_choice="required", store=False,
                                 **SEEDED)
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    assert set(json.loads(call.arguments)) == {"city"}
    follow_up = [*asked, call.model_dump(exclude_none=True),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 degrees C"}]
    second = sdk.responses.create(model=MODEL, input=follow_up, tools=[WEATHER], max_output_tokens=60, **SEEDED)
    assert second.output[0].type == "message" and second.output_text.strip()


def test_a_streamed_call_sends_its_arguments_in_pieces(sdk):
    with sdk.responses.stream(model=MODEL, input="Weather in Oslo?", tools=[WEATHER],
                              tool_choice={"type": "function", "name": "get_weather"}, **SEEDED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.delta" in kinds and "response.output_text.delta" not in kinds
    [done] = [event for event in events if event.type == "response.function_call_arguments.done"]
    [call] = final.output
    assert json.loads(done.arguments) == json.loads(call.arguments) and call.name == "get_weather"


def test_continuing_a_stored_response_and_reading_it_back(sdk, api):
    first = sdk.responses.create(model=MODEL, input="My name is Ada.", instructions="Answer in one sentence.",
                                 max_output_tokens=20, metadata={"test": "chain"}, **SEEDED)
    second = sdk.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                  max_output_tokens=20, **SEEDED)
    assert second.previous_response_id == first.id and second.status in ("completed", "incomplete")
    read = sdk.responses.retrieve(first.id)
    assert read.id == first.id and read.output_text == first.output_text and read.metadata == {"test": "chain"}
    assert read.instructions == "Answer in one sentence."
    items = sdk.responses.input_items.list(second.id)
    assert [item.content[0].text for item in items.data] == ["What is my name?"]  # its own input only
    # The model saw the whole chain: its prompt holds the first exchange too.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    # Another key sees none of it.
    stranger = openai.OpenAI(base_url=f"{api}/v1", api_key="another-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):  # this server takes one key
        stranger.responses.retrieve(first.id)
    deleted = sdk.responses.delete(first.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as lost:
        sdk.responses.create(model=MODEL, input="And now?", previous_response_id=second.id, max_output_tokens=5)
    assert lost.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(sdk):
    response = sdk.responses.create(model=MODEL, input="Hi", max_output_tokens=5, store=False)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response.id)


def test_structured_output_follows_the_schema(sdk):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    response = sdk.responses.create(model=MODEL, input="Give the largest city of France and its population.",
                                    text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                                                     "strict": True}}, max_output_tokens=80, **SEEDED)
    jsonschema.validate(json.loads(response.output_text), schema)
    assert response.text.format.type == "json_schema"


def test_the_token_limit_makes_the_response_incomplete(sdk):
    response = sdk.responses.create(model=MODEL, input="Write a long story about the sea.", max_output_tokens=8,
                                    **SEEDED)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 8 and response.output[0].status == "incomplete"
    with sdk.responses.stream(model=MODEL, input="Write a long poem.", max_output_tokens=8) as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == "response.incomplete"


def test_namespaced_and_hosted_tools(sdk):
    namespace = {"type": "namespace", "name": "weather_server", "description": "Weather tools.",
                 "tools": [{**WEATHER, "strict": False}]}
    response = sdk.responses.create(model=MODEL, input="Weather in Rome?", tools=[namespace, {"type": "web_search"}],
                                    tool_choice="required", parallel_tool_calls=False, **SEEDED)
    [call] = response.output
    assert (call.name, call.namespace) == ("get_weather", "weather_server")
    assert response.parallel_tool_calls is False
    # The namespaced call and its output go back in, as Codex CLI sends them.
    again = sdk.responses.create(model=MODEL, input=[
        {"role": "user", "content": "Weather in Rome?"}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": [{"type": "input_text", "text": "Rain"}]},
    ], tools=[namespace], max_output_tokens=30, **SEEDED)
    assert again.status in ("completed", "incomplete")


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice", "hosted"),
    ({"tools": [{"type": "custom", "name": "patch"}]}, "tools.0", "not supported"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0", "previous_response_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0",
     "input_file"),
    ({"background": True}, "background", "background"),
    ({"tool_choice": "required"}, "tool_choice", "function tools"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": 1}}}]},
     "tools.0.parameters", "JSON Schema"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "Unsupported"),
    ({"user": 7}, "user", "string"),
    ({"previous_response_id": "resp_missing"}, "previous_response_id", "not found"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role", "must be"),
    ({"input": ["not an item"]}, "input.0", "JSON object"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id", "non-empty"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{not json"}]}, "input",
     "not valid JSON"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
     "input", "image"),
])
def test_what_it_cannot_do_is_a_clear_error(api, body, param, words):
    answer = httpx.post(f"{api}/v1/responses", headers={"Authorization": "Bearer secret-key"},
                        json={"model": MODEL, "input": "hi", **body}, timeout=30)
    error = answer.json()["error"]
    assert answer.status_code in (400, 404, 422) and error["param"] == param and words in error["message"], error
    assert set(error) == {"message", "type", "param", "code"}


def test_an_unknown_model_is_a_404(sdk):
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model="gpt-5", input="hi")


def test_the_endpoints_are_documented(api):
    paths = httpx.get(f"{api}/openapi.json", headers={"Authorization": "Bearer secret-key"}).json()["paths"]
    assert {"post"} <= set(paths["/v1/responses"]) and {"get", "delete"} <= set(paths["/v1/responses/{response_id}"])
    assert "get" in paths["/v1/responses/{response_id}/input_items"]


# ----- a reasoning model's thought ----------------------------------------------------------------------------

THOUGHT = ["The user", " asks for", " 2 + 2.", " Two and two", " make four."]


@pytest.fixture(scope="module")
def thinker_api(tmp_path_factory, store):
    folder = build_scripted_model(tmp_path_factory.mktemp("thinker"), ["<think>", *THOUGHT, "</think>", "2 + 2 = 4."])
    client = HFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu"))
    with serving(create_app(ServerSettings(), client=client, response_store=store)) as base:
        yield base, client.capabilities.model_id


def test_the_thought_is_a_reasoning_item_before_the_message(thinker_api):
    base, model = thinker_api
    sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
    with sdk.responses.stream(model=model, input="What is 2 + 2?", reasoning={"summary": "auto"},
                              temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "".join(THOUGHT).strip()
    assert reasoning.summary[0].text == reasoning.content[0].text
    assert message.type == "message" and final.output_text.strip() == "2 + 2 = 4."
    deltas = [event.delta for event in events if event.type == "response.reasoning_text.delta"]
    assert len(deltas) >= 2 and "".join(deltas).strip() == "".join(THOUGHT).strip()
    assert final.usage.output_tokens_details.reasoning_tokens > 0
    # The thought goes back in as a reasoning item, as the SDKs send a conversation back.
    again = sdk.responses.create(model=model, input=[{"role": "user", "content": "What is 2 + 2?"},
                                                     reasoning.model_dump(exclude_none=True),
                                                     message.model_dump(exclude_none=True),
                                                     {"role": "user", "content": "And 3 + 3?"}], temperature=0)
    assert again.status == "completed" and again.output[-1].type == "message"


# ----- failures: the backend mid-stream, the database --------------------------------------------------------------

def test_a_backend_failing_mid_stream_fails_the_response_in_the_stream():
    from tests.fake_client import ScriptedClient

    client = ScriptedClient([[Delta(text="The answer"), RuntimeError("engine crashed")]])
    with serving(create_app(ServerSettings(), client=client)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        with sdk.responses.stream(model="scripted-model", input="Hi", store=False) as stream:
            events = list(stream)
    assert [event.type for event in events][-1] == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.message == "Generating the answer failed."
    assert failed.output[0].content[0].text == "The answer"  # what was written before it failed is not lost
    assert "engine crashed" not in json.dumps(failed.model_dump())  # the server's internals stay in its log


def test_without_its_database_only_stored_responses_are_refused(tmp_path, monkeypatch):
    from tests.fake_client import ScriptedClient, text_reply

    unreachable = tmp_path / "file-not-folder"
    unreachable.write_text("")
    monkeypatch.setenv("DEMO_DATABASE_URL", f"sqlite:///{unreachable}/responses.db")  # its folder is a file
    client = ScriptedClient([text_reply("Fine.")])
    with serving(create_app(ServerSettings(), client=client)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.InternalServerError) as refused:
            sdk.responses.create(model="scripted-model", input="Hi")
        assert refused.value.status_code == 503 and "store=false" in refused.value.message
        assert sdk.responses.create(model="scripted-model", input="Hi", store=False).output_text == "Fine."
        with pytest.raises(openai.InternalServerError):
            sdk.responses.retrieve("resp_1")


def test_input_items_are_listed_in_pages(sdk, api):
    items = [{"role": "user", "content": f"Line {number}."} for number in range(5)]
    response = sdk.responses.create(model=MODEL, input=items, max_output_tokens=2)
    headers = {"Authorization": "Bearer secret-key"}
    first = httpx.get(f"{api}/v1/responses/{response.id}/input_items", params={"limit": 2, "order": "asc"},
                      headers=headers).json()
    assert [item["content"] for item in first["data"]] == ["Line 0.", "Line 1."] and first["has_more"] is True
    rest = httpx.get(f"{api}/v1/responses/{response.id}/input_items",
                     params={"limit": 10, "order": "asc", "after": first["last_id"]}, headers=headers).json()
    assert [item["content"] for item in rest["data"]] == ["Line 2.", "Line 3.", "Line 4."] and not rest["has_more"]
    newest = httpx.get(f"{api}/v1/responses/{response.id}/input_items", params={"limit": 1},
                       headers=headers).json()  # by default newest first, as OpenAI's API lists them
    assert [item["content"] for item in newest["data"]] == ["Line 4."] and newest["has_more"] is True


# ----- what the core receives: a scripted client records it -----------------------------------------------------

def test_items_settings_and_tools_reach_the_core_as_chat(tmp_path):
    """The request as the one generation path sees it: messages by role (developer as system, a function call on
    the assistant message, its output as a tool message, a reasoning item as the next assistant's thought), the
    switched-off thought, the context window as the budget when no max_output_tokens is given, one call at most,
    and two namespaces' same-named tools told apart."""
    from app.domain.conversation import ToolCall
    from tests.fake_client import ScriptedClient, call_reply

    client = ScriptedClient([call_reply(ToolCall("b.search", {"q": "x"}, id="call_9"))])
    search = {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}}}}
    body = {"model": "scripted-model", "instructions": "Be brief.", "parallel_tool_calls": False, "user": "someone",
            "reasoning": {"effort": "none", "generate_summary": 5}, "text": {"verbosity": 5},
            "tools": [{"type": "namespace", "name": "a", "tools": [search]},
                      {"type": "namespace", "name": "b", "tools": [search]}, {"type": "web_search"}],
            "input": [{"role": "developer", "content": [{"type": "input_text", "text": "Rules."},
                                                         {"type": "input_text", "text": "More rules."}]},
                      {"role": "user", "content": "Find x."},
                      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
                      {"type": "function_call", "call_id": "call_1", "name": "search", "namespace": "a",
                       "arguments": "{\"q\": \"x\"}"},
                      {"type": "function_call_output", "call_id": "call_1", "output": "nothing"},
                      {"role": "user", "content": "Try b."}]}
    with serving(create_app(ServerSettings(), client=client)) as base:
        answer = httpx.post(f"{base}/v1/responses", json={**body, "store": False}, timeout=30).json()
    [request] = client.requests
    assert request.roles == ["system", "system", "user", "assistant", "tool", "user"]
    assert request.messages[1]["content"] == "Rules.\n\nMore rules."
    assistant = request.messages[3]
    assert assistant["tool_calls"][0]["function"]["name"] == "a.search" and assistant.get("reasoning_content") \
        in (None, "Hm.")  # the thought is kept on the message, never shown to the model again
    assert request.messages[4] == {"role": "tool", "tool_call_id": "call_1", "content": "nothing"}
    assert request.params.thinking is False and request.params.max_new_tokens == 4096  # the context window
    assert request.tools.parallel_calls is False and request.offered_tools == ["a.search", "b.search"]
    [call] = answer["output"]
    assert (call["name"], call["namespace"], call["call_id"]) == ("search", "b", "call_9")
    # The echo keeps the tools OpenAI's types can repeat (these namespaces lack a description).
    assert [tool["type"] for tool in answer["tools"]] == ["web_search"] and answer["user"] == "someone"


# ----- what the store keeps, and the bounds on it (the store's amplification) ------------------------------------

JUNK = "j" * 200_000


def test_the_store_keeps_only_the_fields_openais_schema_defines(tmp_path):
    """The finding: junk keys inside input items were stored, and hosted tools echoed with theirs (four requests
    stored +178 MB). Items and tools are stored in their schema's shape: a 1.4 MB request stores a few KB."""
    from tests.fake_client import ScriptedClient, text_reply

    engine = open_database(f"sqlite:///{tmp_path}/junk.db")
    client = ScriptedClient([text_reply("Noted."), text_reply("Still noted.")])
    body = {"model": "scripted-model", "tools": [
        {"type": "web_search", "junk": JUNK},
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "junk": JUNK}],
        "input": [
            {"role": "user", "content": "Hi", "junk": JUNK},
            {"type": "message", "role": "user", "junk": JUNK,
             "content": [{"type": "input_text", "text": "Hello", "junk": JUNK}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "junk": JUNK},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok",
                                                                         "junk": JUNK}], "junk": JUNK},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s", "junk": JUNK}], "junk": JUNK}]}
    with serving(create_app(ServerSettings(), client=client, response_store=ResponseStore(engine))) as base:
        answer = httpx.post(f"{base}/v1/responses", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        response = answer.json()
        assert JUNK not in answer.text and [tool["type"] for tool in response["tools"]] == ["web_search", "function"]
        items = httpx.get(f"{base}/v1/responses/{response['id']}/input_items", params={"order": "asc"}).json()
        assert [item["type"] for item in items["data"]] == ["message", "message", "function_call",
                                                            "function_call_output", "reasoning"]
        assert "junk" not in json.dumps(items) and items["data"][1]["content"] == [
            {"type": "input_text", "text": "Hello"}]
        # What was stored still continues: the follow-up's prompt holds the earlier items.
        again = httpx.post(f"{base}/v1/responses", json={"model": "scripted-model", "input": "And?",
                                                         "previous_response_id": response["id"]}, timeout=30)
        assert again.status_code == 200, again.text
    assert client.requests[1].roles == ["user", "user", "assistant", "tool", "assistant", "user"]
    with engine.connect() as connection:
        stored = connection.execute(text("SELECT size, length(input_items) + length(response) FROM api_responses")
                                    ).all()
    assert len(stored) == 2 and all(size < 10_000 and size == length for size, length in stored), stored


def test_a_chain_over_its_size_limit_is_a_400_before_it_is_loaded(tmp_path):
    """The finding: an 8-link chain carrying 16 MB per link grew the server by +873 MB over four follow-ups of 140
    bytes, each link loaded before the size check. The chain is sized from the rows first."""
    from app.config import ResponseStoreSettings
    from tests.fake_client import ScriptedClient, text_reply

    store = ResponseStore(open_database(f"sqlite:///{tmp_path}/chain.db"), ResponseStoreSettings(max_chain_mb=0.5))
    client = ScriptedClient([text_reply("ok") for _ in range(4)])
    with serving(create_app(ServerSettings(), client=client, response_store=store)) as base:
        previous = None
        for turn in range(4):  # the fourth continues three links of 0.2 MB: over 0.5 MB
            answer = httpx.post(f"{base}/v1/responses", timeout=30, json={
                "model": "scripted-model", "input": "x" * 200_000, "previous_response_id": previous})
            if turn < 3:
                assert answer.status_code == 200, answer.text
                previous = answer.json()["id"]
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["param"] == "previous_response_id", error
        assert "DEMO_RESPONSES_MAX_CHAIN_MB" in error["message"]
    assert len(client.requests) == 3  # the fourth never reached the model


def test_input_items_are_bounded_even_those_that_make_no_message(tmp_path):
    """The finding: 200,001 input items were stored (reasoning items and function calls make no message of their
    own, so the limit on messages did not see them)."""
    from tests.fake_client import ScriptedClient, text_reply

    client = ScriptedClient([text_reply("ok")])
    settings = ServerSettings(limits=RequestLimits(max_messages=10))
    store = ResponseStore(open_database(f"sqlite:///{tmp_path}/items.db"))
    with serving(create_app(settings, client=client, response_store=store)) as base:
        many = [{"type": "reasoning", "summary": []}] * 10 + [{"role": "user", "content": "Hi"}]
        answer = httpx.post(f"{base}/v1/responses", json={"model": "scripted-model", "input": many}, timeout=30)
        error = answer.json()["error"]
        assert answer.status_code == 413 and error["param"] == "input" and "11 items" in error["message"], error
        ok = httpx.post(f"{base}/v1/responses", json={"model": "scripted-model", "input": many[1:]}, timeout=30)
        assert ok.status_code == 200, ok.text
    assert len(client.requests) == 1


def test_truncation_disabled_over_the_window_is_a_prompt_400(tiny_model_dir):
    """The finding: truncation "disabled" silently cut the input (after 155 s on a large one), where OpenAI answers
    400. Now counted once and refused before generating; "auto" still drops the oldest turns."""
    client = HFClient(ModelSettings(dtype="float32", model_path=str(tiny_model_dir), device="cpu",
                                    max_context_tokens=256))
    turns = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"Turn {n}: " + "words " * 30}
             for n in range(40)] + [{"role": "user", "content": "Last question?"}]
    with serving(create_app(ServerSettings(), client=client)) as base:
        body = {"model": client.capabilities.model_id, "input": turns, "max_output_tokens": 4, "store": False}
        started = time.perf_counter()
        refused = httpx.post(f"{base}/v1/responses", json={**body, "truncation": "disabled"}, timeout=60)
        took = time.perf_counter() - started
        error = refused.json()["error"]
        assert refused.status_code == 400 and "truncation" in error["message"], error
        assert took < 30  # generous: it is one count of the prompt
        fitted = httpx.post(f"{base}/v1/responses", json={**body, "truncation": "auto"}, timeout=60)
        assert fitted.status_code == 200, fitted.text
        wrong = httpx.post(f"{base}/v1/responses", json={**body, "truncation": "sometimes"}, timeout=60)
        assert wrong.status_code in (400, 422)
