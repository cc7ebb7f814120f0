"""Tool calling through the HF client and the agent's tool loop: tiny models of three template families for
every path, the real SmolLM2 for behaviour."""

from __future__ import annotations

import json
import threading
import time
from contextlib import closing

import pytest

from app.chat_format import process_input
from app.agent import (AnswerDone, TextDelta, ToolCallFinished, ToolCallStarted, ToolSettings, TurnDone, TurnError,
                       ToolCallWriting, Waiting, run_turn)
from app.clients.base import GenerationParams, ToolRequest
from app.clients.hf.client import HFClient
from app.config import ModelSettings
from app.conversation import Conversation, Message
from app.dialects.constraint import call_ebnf
from app.tools import load_tools
from app.tools.registry import ToolError, ToolRegistry
from tests.helpers import collect
from tests.tiny_model import build_tiny_model

registry = load_tools()
SCHEMAS = tuple(registry.schemas())
ASK = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module", params=["qwen", "glm4", "llama3"])
def family_client(request, tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp(request.param), family=request.param)
    return HFClient(ModelSettings(model_path=str(folder), device="cpu"))


def test_the_dialect_is_read_from_the_template(family_client):
    expected = {"qwen": "hermes", "glm4": "glm4", "llama3": "llama3_json"}[family_client.model_path.name[:-1]]
    assert family_client.capabilities.dialect == expected and family_client.capabilities.native_tools
    if expected == "glm4":  # the token that ends a GLM-4 call turn is a stop token
        assert family_client.tokenizer.convert_tokens_to_ids("<|observation|>") in family_client.stop_token_ids


@pytest.mark.parametrize("choice", ["get_weather", "convert_units", "random_number", "required"])
def test_a_forced_call_from_a_random_model_always_parses_and_validates(family_client, choice):
    for seed in range(2):
        text, deltas = collect(family_client, ASK, GenerationParams(temperature=1.0, max_new_tokens=3000, seed=seed),
                               ToolRequest(SCHEMAS, choice))
        last = deltas[-1]
        assert text == "" and last.finish_reason == "tool_calls" and len(last.tool_calls) == 1
        call = last.tool_calls[0]
        assert choice in ("required", call.name)
        assert registry.validation_error(call.name, call.arguments) is None


def test_the_prompt_shows_tools_past_calls_and_results(tiny_client):
    history = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny, 21°C"},
    ]
    with_tools = tiny_client.tokenizer.decode(tiny_client.template.render(history, ToolRequest(SCHEMAS, "auto")).token_ids)
    assert '"name": "get_weather"' in with_tools and "Get the current weather" in with_tools
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in with_tools
    assert "<tool_response>\nsunny, 21°C\n</tool_response>" in with_tools
    without = tiny_client.tokenizer.decode(tiny_client.template.render(history, ToolRequest(SCHEMAS, "none")).token_ids)
    assert "Get the current weather" not in without and "sunny, 21°C" in without
    assert len(tiny_client.template.render(ASK, ToolRequest(SCHEMAS)).token_ids) > len(tiny_client.template.render(ASK).token_ids) + 500


def test_an_unfinished_forced_call_ends_with_length_and_the_app_says_what_to_change(tiny_client):
    cut = GenerationParams(temperature=0.0, max_new_tokens=5)
    text, deltas = collect(tiny_client, ASK, cut, ToolRequest(SCHEMAS, "get_weather"))
    # As OpenAI's and vLLM's APIs do: finish_reason "length", no call, and the call as far as it got.
    assert deltas[-1].finish_reason == "length" and deltas[-1].tool_calls == []
    assert text == ""
    assert [f.name for d in deltas for f in d.call_fragments if f.name] in ([], ["get_weather"])
    conversation = Conversation([Message("user", "Weather in Paris?")])
    local = registry.subset(["get_weather"])
    events = list(run_turn(tiny_client, conversation, cut, tools=ToolSettings(local, choice="get_weather")))
    errors = [e.message for e in events if isinstance(e, TurnError)]
    assert errors == ["The model did not finish the tool call within 5 new tokens. Raise 'Max new tokens' and "
                      "try again."]
    assert [m.role for m in conversation.messages] == ["user", "assistant"]


def test_bad_tool_requests_are_rejected():
    with pytest.raises(ValueError, match="neither auto, none, required nor one of the tools"):
        ToolRequest(SCHEMAS, "launch_rocket")
    with pytest.raises(ValueError, match="needs at least one tool"):
        ToolRequest((), "required")


def test_the_call_grammar_is_portable_ebnf():
    from app.dialects import DIALECTS

    text = call_ebnf([DIALECTS["hermes"].constrained_call(registry.get("get_weather").schema)])
    assert text.startswith("root ::=") and '\\"get_weather\\"' in text and "[0-9]*" not in text


# ----- the tool loop --------------------------------------------------------------------------------------------

def test_the_loop_calls_the_tool_then_answers(tiny_client):
    conversation = Conversation([Message("user", "What is 6 * 7?")])
    tools = ToolSettings(registry.subset(["calculator"]), choice="calculator", max_rounds=2)
    events = list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=200),
                           tools=tools))
    kinds = [type(e).__name__ for e in events if not isinstance(e, (TextDelta, Waiting, ToolCallWriting))]
    assert kinds[:3] == ["AnswerDone", "ToolCallStarted", "ToolCallFinished"] and kinds[-2:] == ["AnswerDone", "TurnDone"]
    roles = [m.role for m in conversation.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = conversation.messages[1].tool_calls[0]
    assert conversation.messages[1].metrics.finish_reason == "tool_calls"
    assert conversation.messages[2].tool_call_id == call.id and conversation.messages[2].duration_s is not None
    # the last allowed round answers in words: no tools offered, so no second call
    assert conversation.messages[3].tool_calls == []


def test_a_failing_tool_becomes_an_observation_and_the_loop_goes_on(tiny_client):
    local = ToolRegistry()

    def picky(n: int) -> str:
        """Refuse every number (the random model may write any).

        Args:
            n: A number.
        """
        raise ToolError(f"{n} is not the number I think of.")

    local.register(picky)
    conversation = Conversation([Message("user", "Try a number")])
    list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=300),
                  tools=ToolSettings(local, choice="picky", max_rounds=2)))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    observation = conversation.messages[2]
    n = conversation.messages[1].tool_calls[0].arguments["n"]
    assert isinstance(n, int)
    assert observation.tool_status == "failed" and observation.content == f"Error: {n} is not the number I think of."
    prompt = tiny_client.tokenizer.decode(tiny_client.template.render(process_input(conversation)).token_ids)
    assert observation.content in prompt  # the model reads the error in the next round


def test_stop_during_a_tool_call_keeps_what_happened(tiny_client):
    local = ToolRegistry()

    def slow_lookup(query: str) -> str:
        """Look something up slowly.

        Args:
            query: What to look up.
        """
        time.sleep(20)
        return "late"

    local.register(slow_lookup, timeout_s=60)
    conversation = Conversation([Message("user", "Look it up")])
    started = time.perf_counter()
    events = run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=100),
                      tools=ToolSettings(local, choice="slow_lookup"))
    with closing(events):
        for event in events:
            if isinstance(event, ToolCallStarted):
                next(events)  # one heartbeat while the tool runs, then the user presses Stop
                break
    assert time.perf_counter() - started < 15
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool"]
    assert conversation.messages[2].tool_status == "stopped" and "stopped" in conversation.messages[2].content


def test_a_cancel_event_stops_a_running_tool(tiny_client):
    local = ToolRegistry()

    def sleepy(label: str) -> str:
        """Sleep a while.

        Args:
            label: A name for the nap.
        """
        time.sleep(20)
        return "woke"

    local.register(sleepy, timeout_s=60)
    cancel = threading.Event()
    conversation = Conversation([Message("user", "Sleep")])
    events = []
    for event in run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=100),
                          cancel=cancel, tools=ToolSettings(local, choice="sleepy")):
        events.append(event)
        if isinstance(event, ToolCallStarted):
            cancel.set()
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished and finished[0].message.tool_status == "stopped" and isinstance(events[-1], TurnDone)


# ----- the real SmolLM2 ----------------------------------------------------------------------------------------

def test_smollm2_has_no_tool_template_and_gets_the_fallback_prompt(smol_client):
    assert smol_client.capabilities.dialect == "hermes" and not smol_client.capabilities.native_tools
    prompt = smol_client.tokenizer.decode(smol_client.template.render(ASK, ToolRequest(SCHEMAS)).token_ids)
    assert "You can call these tools" in prompt and "<tool_call>" in prompt


def test_smollm2_named_call_round_trip(smol_client):
    conversation = Conversation([Message("user", "What is 17 * 23?")])
    tools = ToolSettings(registry.subset(["calculator", "get_weather"]), choice="calculator")
    events = list(run_turn(smol_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=60),
                           "You are a helpful assistant.", tools=tools))
    call = conversation.messages[1].tool_calls[0]
    assert call.name == "calculator" and "17" in call.arguments["expression"] and "23" in call.arguments["expression"]
    assert conversation.messages[2].content == "17 * 23 = 391"
    answer = conversation.messages[3]
    assert answer.role == "assistant" and "391" in answer.content and "<tool" not in answer.content
    assert isinstance(events[-1], TurnDone) and sum(isinstance(e, AnswerDone) for e in events) == 2


def test_smollm2_required_call_is_valid(smol_client):
    request = ToolRequest(tuple(registry.subset(["get_weather", "current_time"]).schemas()), "required")
    messages = [{"role": "user", "content": "What's the weather like in Paris?"}]
    text, deltas = collect(smol_client, messages, GenerationParams(temperature=0.0, max_new_tokens=60), request)
    last = deltas[-1]
    assert text == "" and last.finish_reason == "tool_calls"
    call = last.tool_calls[0]
    assert registry.validation_error(call.name, call.arguments) is None
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert json.loads(json.dumps(call.arguments)) == call.arguments


def test_the_agent_shows_a_forced_call_while_it_is_written(tiny_client):
    conversation = Conversation([Message("user", "Weather in Paris?")])
    tools = ToolSettings(registry.subset(["get_weather"]), choice="get_weather", max_rounds=2)
    events = list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=200),
                           tools=tools))
    writing = [e for e in events if isinstance(e, ToolCallWriting)]
    call = conversation.messages[1].tool_calls[0]
    assert len(writing) >= 2 and writing[0].arguments == ""  # the name first, then the arguments
    assert all(w.name == "get_weather" and w.index == 0 for w in writing)
    assert all(a.arguments == b.arguments[: len(a.arguments)] for a, b in zip(writing, writing[1:]))  # it grows
    assert json.loads(writing[-1].arguments) == call.arguments
    assert events.index(writing[-1]) < next(i for i, e in enumerate(events) if isinstance(e, ToolCallStarted))
