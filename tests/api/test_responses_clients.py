"""The Responses API as real clients use it, against a real server on 127.0.0.1 with SmolLM2: the OpenAI Agents SDK
on its default model path (the Responses API) with a function tool, run whole and streamed; LangChain's
`ChatOpenAI(use_responses_api=True)` with a bound tool and the tool's result sent back."""

from __future__ import annotations

import asyncio

import openai
import pytest
from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from agents.run import RunConfig
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from app.config import ServerSettings
from app.frontends.api.server_app import create_app
from app.storage import open_database
from app.storage.responses import ResponseStore
from harness.local_http import serving

MODEL = "SmolLM2-135M-Instruct"
KEY = "agents-key"


@pytest.fixture(scope="module")
def api(smol_client, tmp_path_factory):
    store = ResponseStore(open_database(f"sqlite:///{tmp_path_factory.mktemp('responses')}/api.db"))
    with serving(create_app(ServerSettings(api_key=KEY), client=smol_client, response_store=store)) as base:
        yield base


def weather_agent(calls: list[str]) -> Agent:
    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is sunny and 24 degrees C in {city}."

    # tool_choice "required" forces the first call (SmolLM2 alone would often answer without it); the SDK resets it
    # after the tool ran, so the next turn can answer in words.
    return Agent(name="Weather", instructions="Answer questions about the weather with the get_weather tool.",
                 tools=[get_weather], model=MODEL,
                 model_settings=ModelSettings(tool_choice="required", temperature=0.0, max_tokens=80,
                                              extra_body={"seed": 3}))


@pytest.fixture
def agents_sdk(api):
    """The SDK's default client pointed at our server; its default model path is the Responses API."""
    client = openai.AsyncOpenAI(base_url=f"{api}/v1", api_key=KEY, max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_tracing_disabled(True)  # traces would go to OpenAI's servers
    return RunConfig(model_provider=OpenAIProvider(openai_client=client))


def test_the_agents_sdk_runs_an_agent_with_a_tool_on_its_default_responses_api(agents_sdk):
    calls: list[str] = []
    assert OpenAIProvider(openai_client=openai.AsyncOpenAI(api_key="x")).get_model(MODEL).__class__.__name__ \
        == "OpenAIResponsesModel"  # the default path, which this test must exercise
    result = Runner.run_sync(weather_agent(calls), "What is the weather in Paris?", max_turns=4,
                             run_config=agents_sdk)
    assert calls and calls[0].strip()
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert [response.response_id[:5] for response in result.raw_responses] == ["resp_", "resp_"]


def test_the_agents_sdk_streams_a_run(agents_sdk):
    calls: list[str] = []

    async def run() -> tuple[list[str], object]:
        result = Runner.run_streamed(weather_agent(calls), "What is the weather in Rome?", max_turns=4,
                                     run_config=agents_sdk)
        raw = [event.data.type async for event in result.stream_events() if event.type == "raw_response_event"]
        return raw, result.final_output

    raw, final = asyncio.run(run())
    assert calls and isinstance(final, str) and final.strip()
    assert raw.count("response.created") == 2 and raw.count("response.completed") + raw.count(
        "response.incomplete") == 2
    assert "response.function_call_arguments.delta" in raw and "response.output_text.delta" in raw


def test_langchain_chat_openai_on_the_responses_api_with_a_bound_tool(api):
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"Rain in {city}."

    llm = ChatOpenAI(model=MODEL, base_url=f"{api}/v1", api_key=KEY, use_responses_api=True, temperature=0,
                     max_retries=0, max_tokens=60, extra_body={"seed": 2})
    question = HumanMessage("What is the weather in Oslo?")
    asked = llm.bind_tools([get_weather], tool_choice="get_weather").invoke([question])
    [call] = asked.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str)
    answer = llm.bind_tools([get_weather]).invoke(
        [question, asked, ToolMessage(get_weather(call["args"]["city"]), tool_call_id=call["id"])])
    assert answer.text.strip() and not answer.tool_calls
