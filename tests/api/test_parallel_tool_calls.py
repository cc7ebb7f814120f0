"""`parallel_tool_calls: false`: at most one tool call per reply, from the core (a reply that ends with its first call,
a forced call's grammar of one call) through the API server and the OpenAI-compatible backend, with a scripted
model (tests/tiny_model.py) that always writes two calls."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from app.clients.client_protocol import GenerationParams, ToolRequest
from app.clients.hf.hf_client import HFClient
from app.clients.openai import OpenAIClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.server_app import create_app
from app.prompting.chat_format import process_response
from app.prompting.dialects import get_dialect
from harness.local_http import serving
from tests.helpers import collect
from tests.tiny_model import build_scripted_model


def _tool(name: str, parameter: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": f"{name}.", "parameters": {
        "type": "object", "properties": {parameter: {"type": "string"}}, "required": [parameter]}}}


TOOLS = [_tool("get_weather", "city"), _tool("web_search", "query")]
WORDS = [f"word{i} " for i in range(30)]  # the second call is long: a reply cut after the first is much shorter
FIRST = ["<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n', "</tool_call>"]
# The second call's tags are other tokens of the same text: each piece of a script may appear once.
SECOND = ["<tool_call>\n", '{"name": "web_search", "arguments": {"query": "', *WORDS, '"}}', "\n</tool_call>"]
SCRIPT = FIRST + SECOND
ASK = [{"role": "user", "content": "Weather in Paris, and the news?"}]
GREEDY = GenerationParams(temperature=0, max_new_tokens=100)
PARIS = ("get_weather", {"city": "Paris"})
SEARCH = ("web_search", {"query": "".join(WORDS)})


@pytest.fixture(scope="module")
def caller(tmp_path_factory):
    """A Qwen-style (Hermes) model that answers everything with the two calls of SCRIPT."""
    folder = build_scripted_model(tmp_path_factory.mktemp("two-calls"), SCRIPT, family="qwen")
    return HFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu"))


class RecordBodies:
    """ASGI middleware that records the JSON body of every chat completion request before the server reads it and,
    with `drop_parallel`, takes `parallel_tool_calls` out of it: a server that does not know the field."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []
        self.drop_parallel = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(parts))
        self.bodies.append(dict(body))
        if self.drop_parallel:
            body.pop("parallel_tool_calls", None)
        data = json.dumps(body).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(data)).encode())]}
        pending = [{"type": "http.request", "body": data, "more_body": False}]

        async def replay() -> Any:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


@pytest.fixture(scope="module")
def recorder(caller):
    return RecordBodies(create_app(ServerSettings(), client=caller))


@pytest.fixture(scope="module")
def api(recorder):
    with serving(recorder) as base:
        yield base


@pytest.fixture
def sdk(api, recorder):
    recorder.drop_parallel = False
    return openai.OpenAI(base_url=f"{api}/v1", api_key="none", max_retries=0)


def _calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or []]


# ----- the core ---------------------------------------------------------------------------------------------------

def test_the_processor_ends_the_reply_with_its_first_call_however_it_is_chunked():
    reply = "".join(SCRIPT) + " and some text after it"
    for dialect in ("hermes", "llama3_json"):
        text = reply if dialect == "hermes" else ('{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                                                  '{"name": "web_search", "parameters": {"query": "x"}}')
        for size in (len(text), 7, 1):  # all at once (both calls in one chunk), and piece by piece
            both = process_response(get_dialect(dialect), TOOLS)
            one = process_response(get_dialect(dialect), TOOLS, parallel_calls=False)
            shown = [one.feed(text[i:i + size]).text for i in range(0, len(text), size)]
            # Hermes finds the call as it is written, so the engine can stop there; Llama 3's only at the end.
            assert one.stopped == (dialect == "hermes")
            both.feed(text)
            assert len(both.finish()[1].tool_calls) == 2 and not both.stopped
            tail, parsed, _ = one.finish()
            assert [(c.name, c.arguments) for c in parsed.tool_calls] == [PARIS], (dialect, size)
            assert "".join(shown) + tail.text == "" and parsed.content == ""


def test_the_hf_client_stops_generating_after_the_first_call(caller):
    text, deltas = collect(caller, ASK, GREEDY, ToolRequest(tuple(TOOLS)))
    last = deltas[-1]
    assert [(c.name, c.arguments) for c in last.tool_calls] == [PARIS, SEARCH] and last.finish_reason == "tool_calls"
    assert last.metrics.completion_tokens >= len(SCRIPT)
    text, deltas = collect(caller, ASK, GREEDY, ToolRequest(tuple(TOOLS), parallel_calls=False))
    last = deltas[-1]
    assert text == "" and last.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in last.tool_calls] == [PARIS]
    assert {f.index for d in deltas for f in d.call_fragments} == {0}
    # The reply ended at the first call's end, and the engine was stopped as a stop string stops it (a token or two
    # it wrote before it heard may be counted).
    assert last.metrics.completion_tokens < len(FIRST) + 5


def test_a_forced_calls_grammar_allows_one_call_and_no_second(tiny_client):
    import xgrammar as xgr

    from app.prompting.dialects.constraint import call_ebnf

    calls = [get_dialect("hermes").constrained_call(tool) for tool in TOOLS]
    first = f'{calls[0].prefix}{{"city": "Paris"}}{calls[0].suffix}'
    second = f'{calls[1].prefix}{{"query": "news"}}{calls[1].suffix}'
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tiny_client.tokenizer))
    grammar = compiler.compile_grammar(call_ebnf(calls))
    for text in (first, second):
        assert xgr.GrammarMatcher(grammar).accept_string(text)
    for text in (first + second, first + "\n" + second):
        assert not xgr.GrammarMatcher(grammar).accept_string(text)


def test_a_forced_required_call_without_parallel_calls_is_one_call(tiny_client):
    for seed in range(2):
        params = GenerationParams(temperature=1.0, max_new_tokens=400, seed=seed)
        text, deltas = collect(tiny_client, ASK, params, ToolRequest(tuple(TOOLS), "required", parallel_calls=False))
        last = deltas[-1]
        assert text == "" and last.finish_reason == "tool_calls" and len(last.tool_calls) == 1
        assert last.tool_calls[0].name in ("get_weather", "web_search")


# ----- the API server, through the openai SDK ---------------------------------------------------------------------

def test_the_server_returns_both_calls_unless_parallel_tool_calls_is_false(sdk, caller):
    model = caller.capabilities.model_id
    both = sdk.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0).choices[0]
    assert both.finish_reason == "tool_calls" and _calls(both.message) == [PARIS, SEARCH]
    assert both.message.content is None
    one = sdk.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0,
                                      parallel_tool_calls=False)
    choice = one.choices[0]
    assert choice.finish_reason == "tool_calls" and _calls(choice.message) == [PARIS]
    assert choice.message.content is None
    assert one.usage.completion_tokens < len(FIRST) + 5 < len(SCRIPT)
    # True is the default, said out loud.
    said = sdk.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0,
                                       parallel_tool_calls=True).choices[0]
    assert _calls(said.message) == [PARIS, SEARCH]


def test_a_stream_without_parallel_tool_calls_carries_one_call_at_index_0(sdk, caller):
    model = caller.capabilities.model_id

    def streamed(**extra: Any) -> tuple[list[Any], str | None]:
        chunks = list(sdk.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0,
                                                  stream=True, **extra))
        pieces = [call for c in chunks if c.choices for call in (c.choices[0].delta.tool_calls or [])]
        assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return pieces, chunks[-1].choices[0].finish_reason

    pieces, finish = streamed()
    assert {p.index for p in pieces} == {0, 1} and finish == "tool_calls"
    pieces, finish = streamed(parallel_tool_calls=False)
    assert {p.index for p in pieces} == {0} and finish == "tool_calls"
    assert [p.function.name for p in pieces if p.function.name] == ["get_weather"]
    assert json.loads("".join(p.function.arguments or "" for p in pieces)) == PARIS[1]


def test_a_forced_call_through_the_server_with_parallel_tool_calls_false(tiny_client):
    with serving(create_app(ServerSettings(), client=tiny_client)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        choice = sdk.chat.completions.create(model=tiny_client.capabilities.model_id, messages=ASK, tools=TOOLS,
                                             tool_choice="required", parallel_tool_calls=False, temperature=1.0,
                                             seed=3, max_tokens=400).choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1


def test_parallel_tool_calls_must_be_a_boolean(sdk, caller):
    with pytest.raises(openai.UnprocessableEntityError):
        sdk.chat.completions.create(model=caller.capabilities.model_id, messages=ASK, tools=TOOLS,
                                    extra_body={"parallel_tool_calls": "sometimes"})


# ----- the OpenAI-compatible backend ------------------------------------------------------------------------------

def test_the_openai_backend_sends_parallel_tool_calls_false_and_keeps_one_call(api, recorder):
    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{api}/v1"))
    recorder.drop_parallel = False
    _, deltas = collect(client, ASK, GREEDY, ToolRequest(tuple(TOOLS)))
    assert "parallel_tool_calls" not in recorder.bodies[-1]  # only a False is sent
    assert [(c.name, c.arguments) for c in deltas[-1].tool_calls] == [PARIS, SEARCH]
    _, deltas = collect(client, ASK, GREEDY, ToolRequest(tuple(TOOLS), parallel_calls=False))
    assert recorder.bodies[-1]["parallel_tool_calls"] is False
    assert [(c.name, c.arguments) for c in deltas[-1].tool_calls] == [PARIS]
    assert deltas[-1].metrics.completion_tokens < len(FIRST) + 5  # the server's usage: it stopped after one call
    # A server that ignores the field writes both calls; the backend keeps only the first.
    recorder.drop_parallel = True
    try:
        _, deltas = collect(client, ASK, GREEDY, ToolRequest(tuple(TOOLS), parallel_calls=False))
    finally:
        recorder.drop_parallel = False
    last = deltas[-1]
    assert [(c.name, c.arguments) for c in last.tool_calls] == [PARIS] and last.finish_reason == "tool_calls"
    assert {f.index for d in deltas for f in d.call_fragments} == {0}
    assert last.metrics.completion_tokens >= len(SCRIPT)  # the server wrote both
