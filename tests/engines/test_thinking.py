"""Reasoning ("thinking") models: the thought split from the answer however the reply streams, through the real
clients (a scripted tiny model whose output is known), kept with the message but never sent back, the template's
switch, the API server's reasoning_content and the OpenAI backend reading it."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.agent.loop import AnswerDone, ThinkingDelta, run_turn
from app.clients.client_protocol import GenerationParams, ToolRequest
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from app.domain.conversation import Conversation, Message
from app.prompting.chat_format import ResponseProcessor, process_input, process_response
from app.prompting.dialects import get_dialect
from app.prompting.thinking import THINK_TAGS, ThinkingSplitter
from app.storage.codec import conversation_to_markdown, decode_message, encode_message
from tests.helpers import collect, readme_screenshot
from tests.tiny_model import TEST_DEVICE, build_scripted_model

THOUGHT = ["The user", " asks for", " 2 + 2.", " Two and two", " make four."]
SCRIPT = ["<think>", *THOUGHT, "</think>", "2 + 2 = 4."]
GREEDY = GenerationParams(temperature=0, max_new_tokens=40)
CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Calculate.", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def split_in_chunks(splitter: ThinkingSplitter, text: str, cuts: list[int]) -> tuple[str, str]:
    thought, answer, start = [], [], 0
    for cut in sorted(set(cuts)) + [len(text)]:
        more_thought, more_answer = splitter.feed(text[start:cut])
        thought.append(more_thought)
        answer.append(more_answer)
        start = cut
    rest_thought, rest_answer = splitter.finish()
    return "".join(thought) + rest_thought, "".join(answer) + rest_answer


# ----- the splitter -----------------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_characters="<>"), max_size=30)


@settings(max_examples=300, deadline=None)
@given(thought=_text, answer=_text, lead=st.sampled_from(["", " ", "\n"]), data=st.data())
def test_a_thought_and_its_answer_come_apart_wherever_the_stream_is_cut(thought, answer, lead, data):
    reply = f"{lead}<think>{thought}</think>{answer}"
    cuts = data.draw(st.lists(st.integers(0, len(reply)), max_size=len(reply)))
    assert split_in_chunks(ThinkingSplitter(), reply, cuts) == (thought, answer)


@settings(max_examples=200, deadline=None)
@given(answer=st.text(max_size=30), data=st.data())
def test_a_reply_without_a_thought_is_all_answer_wherever_the_stream_is_cut(answer, data):
    reply = "Sure. " + answer  # anything that does not begin with the marker: markers later on are answer text
    cuts = data.draw(st.lists(st.integers(0, len(reply)), max_size=len(reply)))
    assert split_in_chunks(ThinkingSplitter(), reply, cuts) == ("", reply)


@settings(max_examples=200, deadline=None)
@given(thought=_text, answer=_text, data=st.data())
def test_a_thought_the_prompt_opened_ends_at_its_marker_wherever_the_stream_is_cut(thought, answer, data):
    reply = f"{thought}</think>{answer}"
    cuts = data.draw(st.lists(st.integers(0, len(reply)), max_size=len(reply)))
    assert split_in_chunks(ThinkingSplitter(started=True), reply, cuts) == (thought, answer)


def test_an_unclosed_thought_is_all_thought_and_a_marker_start_at_the_end_is_not_lost():
    assert split_in_chunks(ThinkingSplitter(), "<think>still going", [3, 9]) == ("still going", "")
    assert split_in_chunks(ThinkingSplitter(), "<thi", [2]) == ("", "<thi")


# ----- tool calls in and after a thought --------------------------------------------------------------------------

def _processed(processor: ResponseProcessor, reply: str) -> tuple[str, str, list]:
    thought, text = [], []
    for index in range(0, len(reply), 3):
        piece = processor.feed(reply[index:index + 3])
        thought.append(piece.thinking)
        text.append(piece.text)
    tail, parsed, _ = processor.finish()
    return "".join(thought) + tail.thinking, "".join(text) + tail.text, parsed.tool_calls


def test_a_call_after_the_thought_parses_and_the_thought_stays_apart():
    processor = process_response(get_dialect("hermes"), [CALCULATOR], thinking=THINK_TAGS)
    reply = ('<think>I should use the calculator.</think>\n<tool_call>\n{"name": "calculator", "arguments": '
             '{"expression": "17*23"}}\n</tool_call>')
    thought, text, calls = _processed(processor, reply)
    assert thought == "I should use the calculator." and text.strip() == ""
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "17*23"})]


def test_a_call_begun_inside_an_unclosed_thought_still_parses():
    processor = process_response(get_dialect("hermes"), [CALCULATOR], thinking=THINK_TAGS)
    reply = ('<think>Let me compute it. <tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n'
             '</tool_call>')
    thought, _, calls = _processed(processor, reply)
    assert thought == "Let me compute it. " and [c.arguments for c in calls] == [{"expression": "2+2"}]


# ----- a template with thinking, the real clients -----------------------------------------------------------------

@pytest.fixture(scope="module")
def thinker_dir(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("thinker"), SCRIPT)


@pytest.fixture(scope="module")
def thinker(thinker_dir):
    return HFClient(ModelSettings(dtype="float32", model_path=str(thinker_dir), device=TEST_DEVICE))


def test_the_template_is_recognised_as_a_reasoning_one_with_a_switch(thinker, tiny_client):
    assert thinker.capabilities.thinking and thinker.capabilities.thinking_switch
    assert not tiny_client.capabilities.thinking and not tiny_client.capabilities.thinking_switch
    ask = [{"role": "user", "content": "hi"}]
    assert thinker.template.render(ask, thinking=False).text.endswith("<think>\n\n</think>\n\n")
    assert thinker.template.render(ask, thinking=True).text.endswith("assistant\n")
    assert thinker.template.render(ask).text == thinker.template.render(ask, thinking=True).text


def test_the_thought_streams_apart_from_the_answer_through_the_real_client(thinker):
    text, deltas = collect(thinker, [{"role": "user", "content": "What is 2 + 2?"}], GREEDY)
    assert text.strip() == "2 + 2 = 4."
    assert "".join(d.thinking for d in deltas) == "".join(THOUGHT)
    assert sum(1 for d in deltas if d.thinking) >= 2  # it streamed, not one block at the end
    metrics = deltas[-1].metrics
    assert deltas[-1].finish_reason == "stop" and metrics.thinking_tokens == len(THOUGHT) + 2  # with its two tags
    assert metrics.thinking_time_s is not None and metrics.thinking_time_s <= metrics.total_time_s


def test_a_thought_the_prompt_opens_is_split_too(tmp_path):
    folder = build_scripted_model(tmp_path / "r1", [*THOUGHT, "</think>", "4."], family="r1")
    client = HFClient(ModelSettings(dtype="float32", model_path=str(folder), device=TEST_DEVICE))
    text, deltas = collect(client, [{"role": "user", "content": "What is 2 + 2?"}], GREEDY)
    assert text.strip() == "4." and "".join(d.thinking for d in deltas) == "".join(THOUGHT)


def test_the_thought_is_kept_with_the_message_and_never_sent_back(thinker):
    conversation = Conversation([Message(role="user", content="What is 2 + 2?")])
    events = list(run_turn(thinker, conversation, GREEDY, cancel=threading.Event()))
    answer = next(e.message for e in events if isinstance(e, AnswerDone))
    assert answer.thinking == "".join(THOUGHT) and answer.content == "2 + 2 = 4."
    assert [e.text for e in events if isinstance(e, ThinkingDelta)]
    assert decode_message(encode_message(answer)) == answer  # stored with it
    assert "**Thought** (7 tokens)\n\n```text\nThe user asks" in conversation_to_markdown("t", [answer])
    conversation.add(Message(role="user", content="And 3 + 3?"))
    prompt = thinker.template.render(process_input(conversation)).text
    assert "2 + 2 = 4." in prompt and "Two and two" not in prompt


def test_without_tools_a_forced_call_has_no_thought_and_tools_after_a_thought_work(thinker):
    forced = ToolRequest((CALCULATOR,), choice="calculator")
    prompt = thinker.template.prepare([{"role": "user", "content": "2+2?"}], GREEDY, forced)
    assert prompt.grammar is not None  # the grammar decides the whole reply: no thought to split
    text, deltas = collect(thinker, [{"role": "user", "content": "What is 2 + 2?"}], GREEDY,
                           tools=ToolRequest((CALCULATOR,), choice="auto"))
    assert "".join(d.thinking for d in deltas) == "".join(THOUGHT) and text.strip() == "2 + 2 = 4."


def test_vllm_splits_the_thought_the_same_way(vllm_thinker):
    text, deltas = collect(vllm_thinker, [{"role": "user", "content": "What is 2 + 2?"}], GREEDY)
    assert text.strip() == "2 + 2 = 4." and "".join(d.thinking for d in deltas) == "".join(THOUGHT)
    assert deltas[-1].metrics.thinking_tokens == len(THOUGHT) + 2


# ----- the API server and the OpenAI backend -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def thinker_api(thinker):
    from app.config import ServerSettings
    from app.frontends.api.server_app import create_app
    from harness.local_http import serving

    with serving(create_app(ServerSettings(), client=thinker)) as base:
        yield base


def test_the_server_returns_the_thought_as_reasoning_content(thinker_api, thinker):
    import openai

    sdk = openai.OpenAI(base_url=f"{thinker_api}/v1", api_key="none", max_retries=0)
    model = thinker.capabilities.model_id
    ask = [{"role": "user", "content": "What is 2 + 2?"}]
    reply = sdk.chat.completions.create(model=model, messages=ask, temperature=0)
    message = reply.choices[0].message
    assert message.content == "2 + 2 = 4." and message.model_extra["reasoning_content"] == "".join(THOUGHT)
    chunks = list(sdk.chat.completions.create(model=model, messages=ask, temperature=0, stream=True))
    streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks
                       if c.choices)
    assert streamed == "".join(THOUGHT)
    # The template's switch: off, the prompt closes an empty thought (the scripted model still writes its script).
    off = sdk.chat.completions.create(model=model, messages=ask, temperature=0,
                                      extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens > reply.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError, match="enable_thinking"):
        sdk.chat.completions.create(model=model, messages=ask, extra_body={"chat_template_kwargs": {"x": 1}})


def test_the_openai_backend_reads_reasoning_content_and_passes_the_switch(thinker_api):
    from app.clients.openai import OpenAIClient

    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{thinker_api}/v1"))
    ask = [{"role": "user", "content": "What is 2 + 2?"}]
    text, deltas = collect(client, ask, GREEDY)
    assert text == "2 + 2 = 4." and "".join(d.thinking for d in deltas) == "".join(THOUGHT)
    assert deltas[-1].metrics.thinking_tokens > 0
    default = collect(client, ask, GREEDY)[1][-1].metrics.prompt_tokens
    off = collect(client, ask, GenerationParams(temperature=0, max_new_tokens=40, thinking=False))[1][-1]
    assert off.metrics.prompt_tokens > default


# ----- the page ---------------------------------------------------------------------------------------------------

def test_the_chat_page_shows_the_thought_collapsed_above_the_answer(monkeypatch, thinker_dir):
    from tests.helpers import open_app

    with open_app(monkeypatch, thinker_dir) as at:
        at.chat_input(key="chat_input").set_value("What is 2 + 2?").run()
        assert not at.exception
        answer = at.chat_message[1]
        (thought,) = answer.expander
        assert thought.label.startswith("Thought for") and f"{len(THOUGHT) + 2} tokens" in thought.label
        assert thought.markdown[0].value == "".join(THOUGHT)
        assert answer.markdown[-1].value == "2 + 2 = 4."
        at.segmented_control(key="thinking").set_value("Off").run()
        assert at.session_state["_sidebar"].params.thinking is False


def test_in_a_real_browser_the_thought_streams_into_its_section_and_opens_on_click(thinker_dir, browser):
    import os

    from tests.helpers import ARTIFACTS, model_loaded, streamlit_app

    ARTIFACTS.mkdir(exist_ok=True)
    env = {**os.environ, "DEMO_MODEL": str(thinker_dir), "HF_HUB_OFFLINE": "1"}
    with streamlit_app(env, "streamlit-thinking.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url)
        model_loaded(page, model=thinker_dir.name)
        box = page.get_by_test_id("stChatInputTextArea")
        box.fill("What is 2 + 2?")
        box.press("Enter")
        answer = page.locator('[data-testid="stChatMessage"]').nth(1)
        answer.get_by_text("tok/s").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)  # the page redraws once after the turn
        page.get_by_test_id("stStatusWidget").wait_for(state="hidden", timeout=30_000)
        section = answer.get_by_test_id("stExpander")
        section.get_by_text("Thought for").wait_for(timeout=30_000)
        assert "2 + 2 = 4." in answer.inner_text() and "Two and two" not in answer.inner_text()  # collapsed
        section.get_by_text("Thought for").click()
        section.get_by_text("Two and two make four.").wait_for(timeout=10_000)
        page.wait_for_timeout(500)  # the section's opening animation
        page.mouse.move(700, 5)
        readme_screenshot(page, "thinking.png")
        page.close()
