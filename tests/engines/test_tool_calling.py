"""Tool calling through the HF client and the agent's tool loop: tiny models of three template families for
every path of the client, a scripted client (tests/fake_client.py) for the loop's logic, the real SmolLM2 for
behaviour."""

from __future__ import annotations

import json
import threading
import time
from contextlib import closing

import pytest

from app.agent.loop import (
    AnswerDone,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallWriting,
    ToolSettings,
    TurnDone,
    TurnError,
    Waiting,
    run_turn,
)
from app.clients.client_protocol import Delta, GenerationParams, ToolRequest
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from app.domain.conversation import CallFragment, Conversation, Message, ToolCall
from app.prompting.dialects.constraint import call_ebnf
from app.tools import load_tools
from app.tools.tool_registry import ToolError, ToolRegistry
from tests.fake_client import ScriptedClient, call_reply, text_reply
from tests.helpers import collect
from tests.tiny_model import TEST_DEVICE, build_tiny_model

registry = load_tools()
SCHEMAS = tuple(registry.schemas())
ASK = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module", params=["qwen", "glm4", "llama3"])
def family_client(request, tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp(request.param), family=request.param)
    return HFClient(ModelSettings(dtype="float32", model_path=str(folder), device=TEST_DEVICE))


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
    render = tiny_client.template.render
    with_tools = tiny_client.tokenizer.decode(render(history, ToolRequest(SCHEMAS, "auto")).token_ids)
    assert '"name": "get_weather"' in with_tools and "Get the current weather" in with_tools
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in with_tools
    assert "<tool_response>\nsunny, 21°C\n</tool_response>" in with_tools
    without = tiny_client.tokenizer.decode(render(history, ToolRequest(SCHEMAS, "none")).token_ids)
    assert "Get the current weather" not in without and "sunny, 21°C" in without
    assert len(render(ASK, ToolRequest(SCHEMAS)).token_ids) > len(render(ASK).token_ids) + 500


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
    from app.prompting.dialects import DIALECTS

    text = call_ebnf([DIALECTS["hermes"].constrained_call(registry.get("get_weather").schema)])
    assert text.startswith("root ::=") and '\\"get_weather\\"' in text and "[0-9]*" not in text


# The README's first API example: a forced calculator call whose schema has no descriptions.
README_CALCULATOR = {"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def test_a_string_argument_cannot_swallow_the_end_of_the_call(tiny_client):
    """A `}` or `]` in a JSON string must close a bracket opened in that string: SmolLM2 ended the expression with
    `}}` but no quote and wrote on inside the string for 1,024 tokens. Every string can still be written (escaped)."""
    import xgrammar as xgr

    from app.prompting.dialects import DIALECTS
    from app.prompting.dialects.constraint import reply_ebnf

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tiny_client.tokenizer))
    call = DIALECTS["hermes"].constrained_call(README_CALCULATOR)
    forced = compiler.compile_grammar(call_ebnf([call]))

    def takes(grammar, text: str) -> bool:
        return xgr.GrammarMatcher(grammar).accept_string(text)

    for expression in ["17 * 23", "{10}", "a [b {c} d] e", "a { b", "[", "\\u007d \\u005d", "x \\u005d"]:
        assert takes(forced, f'{call.prefix}{{"expression": "{expression}"}}{call.suffix}'), expression
    for expression in ["17 * 23}}", "}", "{10}}", "x ] y", "[ {]", "{ [ x ] } }"]:
        assert not takes(forced, f'{call.prefix}{{"expression": "{expression}'), expression
    answer = compiler.compile_grammar(reply_ebnf([], {"type": "object", "properties": {"name": {"type": "string"}}}))
    assert takes(answer, '{"name": "Paris [FR]"}') and not takes(answer, '{"name": "Paris}')


def test_forced_text_is_written_in_the_tokenizers_own_tokens(smol_client):
    """Where the grammar forces a text, only the first token of its own tokenization may end inside it: SmolLM2 wrote
    a lone space after `"expression":` and then an empty string, where its tokenizer writes ` "` in one token."""
    import xgrammar as xgr

    from app.clients.hf.grammar import ForcedTokens

    tokenizer = smol_client.tokenizer
    forced = ForcedTokens(tokenizer, xgr.TokenizerInfo.from_huggingface(tokenizer).decoded_vocab)

    def split(text: str) -> tuple[str, list[str]]:
        first, masked = forced.split(text)
        return tokenizer.decode([first]), sorted(tokenizer.decode([token]) for token in masked)

    assert split(' "') == (' "', [" "])
    assert split('": "') == ('":', ['"'])
    assert split('"}') == ('"}', ['"'])
    assert split("<tool_call>\n{") == ("<", [])
    assert forced.split("") == (-1, [])


def test_smollm2_answers_the_readme_calculator_call_promptly(smol_client):
    """The README's curl example, through the client with the model's own sampling defaults (what the server
    uses): every seed gives the call in a few dozen tokens. Before, 11 of 12 seeds ran to the token limit inside
    the expression string ("17 * 23}}  # 17 * 23 = 312.57 ...") or wrote an empty one."""
    from app.tools.calculator import evaluate

    request = ToolRequest((README_CALCULATOR,), "calculator")
    for seed in range(4):
        params = smol_client.generation_defaults.params(max_new_tokens=120, seed=seed)
        text, deltas = collect(smol_client, [{"role": "user", "content": "What is 17 * 23?"}], params, request)
        last = deltas[-1]
        assert last.finish_reason == "tool_calls" and last.metrics.completion_tokens < 60, (seed, last)
        assert evaluate(last.tool_calls[0].arguments["expression"]) == 391, (seed, last.tool_calls)


# ----- the tool loop, on a scripted client (tests/fake_client.py): the loop's logic, whatever a model would write -----

PARAMS = GenerationParams(temperature=0.0, max_new_tokens=200)


def kinds(events, skip=(Waiting,)) -> list[str]:
    """The events' types; Waiting beats (as many as a tool takes time) left out."""
    return [type(e).__name__ for e in events if not isinstance(e, skip)]


def test_the_loop_calls_the_tool_then_answers():
    call = ToolCall("calculator", {"expression": "6 * 7"})
    client = ScriptedClient([call_reply(call), text_reply("6 * 7 is ", "42.")])
    conversation = Conversation([Message("user", "What is 6 * 7?")])
    tools = ToolSettings(registry.subset(["calculator"]), choice="calculator", max_rounds=2)
    events = list(run_turn(client, conversation, PARAMS, tools=tools))
    assert kinds(events) == ["ToolCallWriting", "ToolCallWriting", "AnswerDone", "ToolCallStarted", "ToolCallFinished",
                             "TextDelta", "TextDelta", "AnswerDone", "TurnDone"]
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert started.call is call and finished.call is call and finished.result.ok
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    asked, tool, answer = conversation.messages[1:]
    assert asked.tool_calls == [call] and asked.metrics.finish_reason == "tool_calls"
    assert finished.message is tool and tool.tool_call_id == call.id and tool.tool_status == "ok"
    assert tool.content == "6 * 7 = 42" and tool.duration_s is not None
    assert answer.content == "6 * 7 is 42." and events[-1].message is answer
    # What the model was asked: the forced call first; then, the last allowed round, no tools and the result.
    first, second = client.requests
    assert (first.tool_choice, first.offered_tools, first.roles) == ("calculator", ["calculator"], ["user"])
    assert (second.tool_choice, second.offered_tools) == ("none", [])
    assert second.roles == ["user", "assistant", "tool"]
    assert second.messages[1]["tool_calls"] == [call.to_openai()]
    assert second.messages[2] == {"role": "tool", "content": "6 * 7 = 42", "tool_call_id": call.id,
                                  "name": "calculator"}


def test_a_forced_choice_holds_for_the_first_round_only_and_the_last_round_answers_in_words():
    client = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "2 ** 10"})),
                             call_reply(ToolCall("calculator", {"expression": "1024 / 4"})),
                             text_reply("256.")])
    conversation = Conversation([Message("user", "A quarter of 2 ** 10?")])
    tools = ToolSettings(registry.subset(["calculator"]), choice="required", max_rounds=3)
    events = list(run_turn(client, conversation, PARAMS, tools=tools))
    assert [r.tool_choice for r in client.requests] == ["required", "auto", "none"]
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m.content for m in conversation.messages if m.role == "tool"] == ["2 ** 10 = 1024", "1024 / 4 = 256"]
    assert sum(isinstance(e, AnswerDone) for e in events) == 3 and events[-1].message.content == "256."
    assert client.requests[2].roles == ["user", "assistant", "tool", "assistant", "tool"]


def test_a_failing_tool_becomes_an_observation_and_the_loop_goes_on():
    local = ToolRegistry()

    def picky(n: int) -> str:
        """Refuse every number.

        Args:
            n: A number.
        """
        raise ToolError(f"{n} is not the number I think of.")

    local.register(picky)
    client = ScriptedClient([call_reply(ToolCall("picky", {"n": 7})), text_reply("Then I give up.")])
    conversation = Conversation([Message("user", "Try a number")])
    events = list(run_turn(client, conversation, PARAMS, tools=ToolSettings(local, choice="picky", max_rounds=2)))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    observation = conversation.messages[2]
    assert not finished.result.ok and finished.message is observation
    assert observation.tool_status == "failed" and observation.content == "Error: 7 is not the number I think of."
    assert client.requests[1].messages[-1]["content"] == observation.content  # the model reads the error next round
    assert isinstance(events[-1], TurnDone) and events[-1].message.content == "Then I give up."


def test_calls_the_registry_cannot_run_are_error_observations_in_the_order_of_the_calls():
    unknown = ToolCall("launch_rocket", {"target": "moon"})
    wrong = ToolCall("calculator", {"formula": "1 + 1"})
    right = ToolCall("calculator", {"expression": "1 + 1"})
    client = ScriptedClient([call_reply(unknown, wrong, right, text="Let me try three things."), text_reply("2.")])
    conversation = Conversation([Message("user", "1 + 1?")])
    events = list(run_turn(client, conversation, PARAMS, tools=ToolSettings(registry.subset(["calculator"]))))
    assert [e.call for e in events if isinstance(e, ToolCallStarted)] == [unknown, wrong, right]
    observations = conversation.messages[2:5]
    assert [m.tool_call_id for m in observations] == [unknown.id, wrong.id, right.id]
    assert [m.tool_status for m in observations] == ["failed", "failed", "ok"]
    assert observations[0].content.startswith("Error: there is no tool named 'launch_rocket'.")
    assert observations[1].content.startswith("Error:") and observations[2].content == "1 + 1 = 2"
    assert conversation.messages[1].content == "Let me try three things."
    assert client.requests[1].roles == ["user", "assistant", "tool", "tool", "tool"]


def test_the_agent_shows_calls_while_they_are_written():
    calls = [ToolCall("calculator", {"expression": "3 * 4"}, id="call_a"),
             ToolCall("convert_units", {"value": 12, "from_unit": "km", "to_unit": "mi"}, id="call_b")]
    client = ScriptedClient([[
        Delta(call_fragments=[CallFragment(0, id="call_a", name="calculator")]),
        Delta(call_fragments=[CallFragment(0, '{"expression": '), CallFragment(1, id="call_b", name="convert_units")]),
        Delta(call_fragments=[CallFragment(0, '"3 * 4"}'), CallFragment(1, '{"value": 12, "from_unit": "km", ')]),
        Delta(call_fragments=[CallFragment(1, '"to_unit": "mi"}')]),
        Delta(finish_reason="tool_calls", tool_calls=calls),
    ], text_reply("Done.")])
    tools = ToolSettings(registry.subset(["calculator", "convert_units"]), max_rounds=2)
    events = list(run_turn(client, Conversation([Message("user", "3 * 4 km in miles?")]), PARAMS, tools=tools))
    writing = [(e.index, e.name, e.arguments) for e in events if isinstance(e, ToolCallWriting)]
    assert writing == [  # a call's name always on its own first, then its arguments as they grow
        (0, "calculator", ""),
        (1, "convert_units", ""),
        (0, "calculator", '{"expression": '),
        (0, "calculator", '{"expression": "3 * 4"}'),
        (1, "convert_units", '{"value": 12, "from_unit": "km", '),
        (1, "convert_units", '{"value": 12, "from_unit": "km", "to_unit": "mi"}'),
    ]
    last_writing = max(i for i, e in enumerate(events) if isinstance(e, ToolCallWriting))
    assert last_writing < min(i for i, e in enumerate(events) if isinstance(e, ToolCallStarted))


def test_a_forced_call_cut_by_the_token_limit_is_an_error_that_says_what_to_change():
    cut = [Delta(call_fragments=[CallFragment(0, id="c", name="calculator")]),
           Delta(call_fragments=[CallFragment(0, '{"expr')]), Delta(finish_reason="length")]
    client = ScriptedClient([cut, list(cut)])
    conversation = Conversation([Message("user", "6 * 7?")])
    forced = ToolSettings(registry.subset(["calculator"]), choice="calculator")
    events = list(run_turn(client, conversation, GenerationParams(max_new_tokens=2), tools=forced))
    assert kinds(events) == ["ToolCallWriting", "ToolCallWriting", "TurnError", "AnswerDone", "TurnDone"]
    assert events[2].message == ("The model did not finish the tool call within 2 new tokens. Raise 'Max new tokens' "
                                 "and try again.")
    assert conversation.messages[-1].error == events[2].message
    # Not forced, a reply cut so is just a reply cut short: no error, no call.
    conversation.add(Message("user", "6 * 7?"))
    unforced = ToolSettings(forced.registry)
    events = list(run_turn(client, conversation, GenerationParams(max_new_tokens=2), tools=unforced))
    assert kinds(events) == ["ToolCallWriting", "ToolCallWriting", "AnswerDone", "TurnDone"]
    assert conversation.messages[-1].error is None and conversation.messages[-1].metrics.finish_reason == "length"


def test_stop_while_the_model_writes_a_call_runs_no_tool():
    client = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "1 + 1"}))])
    conversation = Conversation([Message("user", "1 + 1?")])
    cancel = threading.Event()
    events = []
    tools = ToolSettings(registry.subset(["calculator"]))
    for event in run_turn(client, conversation, PARAMS, cancel=cancel, tools=tools):
        events.append(event)
        if isinstance(event, ToolCallWriting):
            cancel.set()
    assert kinds(events) == ["ToolCallWriting", "AnswerDone", "TurnDone"]
    assert conversation.messages[-1].stopped and conversation.messages[-1].tool_calls == []
    assert len(client.requests) == 1


def test_stop_during_a_tool_call_keeps_what_happened():
    local = ToolRegistry()

    def slow_lookup(query: str) -> str:
        """Look something up slowly.

        Args:
            query: What to look up.
        """
        time.sleep(20)
        return "late"

    local.register(slow_lookup, timeout_s=60)
    client = ScriptedClient([call_reply(ToolCall("slow_lookup", {"query": "the answer"}))])
    conversation = Conversation([Message("user", "Look it up")])
    started = time.perf_counter()
    events = run_turn(client, conversation, PARAMS, tools=ToolSettings(local, choice="slow_lookup"))
    with closing(events):
        for event in events:
            if isinstance(event, ToolCallStarted):
                assert isinstance(next(events), Waiting)  # one heartbeat while the tool runs, then Stop
                break
    assert time.perf_counter() - started < 15
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool"]
    assert conversation.messages[2].tool_status == "stopped" and "stopped" in conversation.messages[2].content
    assert len(client.requests) == 1 and not client.requests[0].closed_early  # the reply itself had ended


def test_a_cancel_event_stops_a_running_tool():
    local = ToolRegistry()

    def sleepy(label: str) -> str:
        """Sleep a while.

        Args:
            label: A name for the nap.
        """
        time.sleep(20)
        return "woke"

    local.register(sleepy, timeout_s=60)
    client = ScriptedClient([call_reply(ToolCall("sleepy", {"label": "siesta"}))])
    cancel = threading.Event()
    conversation = Conversation([Message("user", "Sleep")])
    events = []
    started = time.perf_counter()
    for event in run_turn(client, conversation, PARAMS, cancel=cancel, tools=ToolSettings(local, choice="sleepy")):
        events.append(event)
        if isinstance(event, ToolCallStarted):
            cancel.set()
    assert time.perf_counter() - started < 15
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished and finished[0].message.tool_status == "stopped" and isinstance(events[-1], TurnDone)
    assert len(client.requests) == 1  # no round after a stopped tool


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


def test_the_agent_shows_a_forced_call_while_the_real_client_writes_it(tiny_client):
    """On a model: that the HF client streams a call piece by piece (the scripted test above shows the agent's part)."""
    conversation = Conversation([Message("user", "Weather in Paris?")])
    tools = ToolSettings(registry.subset(["get_weather"]), choice="get_weather", max_rounds=2)
    events = list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=200),
                           tools=tools))
    writing = [e for e in events if isinstance(e, ToolCallWriting)]
    call = conversation.messages[1].tool_calls[0]
    assert len(writing) >= 2 and writing[0].arguments == ""  # the name first, then the arguments
    assert all(w.name == "get_weather" and w.index == 0 for w in writing)
    growing = zip(writing, writing[1:], strict=False)
    assert all(a.arguments == b.arguments[: len(a.arguments)] for a, b in growing)  # it grows
    assert json.loads(writing[-1].arguments) == call.arguments
    assert events.index(writing[-1]) < next(i for i, e in enumerate(events) if isinstance(e, ToolCallStarted))
