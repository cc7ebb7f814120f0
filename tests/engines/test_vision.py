"""Pictures in the conversation: OpenAI content parts in and out, what a prompt shows, and a tiny vision-language
model (SmolVLM-shaped, tests/tiny_vlm.py) on transformers, seeing them; a text-only model refusing them clearly."""

from __future__ import annotations

import base64
import io
import threading

import pytest
from PIL import Image

from app.agent.loop import AnswerDone, ToolSettings, TurnError, run_turn
from app.clients.client_protocol import ClientError, GenerationParams
from app.clients.vision import NO_VISION
from app.domain.conversation import Attachment, Conversation, Message
from app.domain.media import to_data_url
from app.prompting.chat_format import ImagePolicy, process_input
from app.tools.tool_registry import ToolOutput, ToolRegistry
from tests.helpers import collect
from tests.tiny_vlm import IMAGE_TOKEN, IMAGE_TOKENS_PER_IMAGE

SHORT = GenerationParams(temperature=0, max_new_tokens=6)


def png(colour: str = "red", size: tuple[int, int] = (64, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def picture(name: str = "red.png", colour: str = "red") -> Attachment:
    return Attachment(kind="image", name=name, data=png(colour))


def image_message(text: str = "What colour is this?", colour: str = "red") -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": to_data_url(png(colour))}},
                                        {"type": "text", "text": text}]}


# ----- the conversation in OpenAI's shape --------------------------------------------------------------------------

def test_a_users_picture_goes_out_as_an_image_part_before_the_text_and_comes_back():
    message = Message(role="user", content="What is this?", attachments=[picture()])
    data = message.to_openai()
    assert [part["type"] for part in data["content"]] == ["image_url", "text"]
    assert data["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    again = Message.from_openai(data)
    assert again.content == "What is this?" and len(again.images) == 1
    assert Image.open(io.BytesIO(again.images[0].data)).getpixel((0, 0)) == (255, 0, 0)


def test_images_are_taken_from_data_urls_only_unless_a_fetcher_is_given():
    remote = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}
    with pytest.raises(ValueError, match="data URL"):
        Message.from_openai(remote)
    fetched = Message.from_openai(remote, fetch_image=lambda url: png("blue"))
    assert Image.open(io.BytesIO(fetched.images[0].data)).getpixel((0, 0)) == (0, 0, 255)


@pytest.mark.parametrize("message, problem", [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]},
     "base64"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(b"not a picture at all").decode()}}]}, "PNG, JPEG"),
    ({"role": "user", "content": [{"type": "image_url"}]}, "image_url"),
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, "not supported"),
    ({"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": to_data_url(png())}}]},
     "only user messages"),
])
def test_bad_image_parts_are_refused_with_the_reason(message, problem):
    with pytest.raises(ValueError, match=problem):
        Message.from_openai(message)


# ----- what a prompt shows ----------------------------------------------------------------------------------------

def _conversation_with_pictures(count: int) -> Conversation:
    conversation = Conversation()
    for index in range(count):
        conversation.add(Message(role="user", content=f"picture {index}", attachments=[picture(f"p{index}.png")]))
        conversation.add(Message(role="assistant", content=f"answer {index}"))
    conversation.messages.pop()  # the last picture waits for its answer
    return conversation


def _image_count(messages: list[dict]) -> int:
    return sum(1 for m in messages if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url")


def test_only_the_newest_pictures_are_shown_and_the_rest_are_named_in_notes():
    messages = process_input(_conversation_with_pictures(6), images=ImagePolicy(max_images=4))
    assert _image_count(messages) == 4
    assert messages[0]["content"].startswith("[An earlier image (p0.png) is left out: a prompt shows at most 4")
    assert isinstance(messages[-1]["content"], list)


def test_a_text_only_answer_says_a_picture_was_attached_instead_of_dropping_it():
    messages = process_input(_conversation_with_pictures(1), images=ImagePolicy(see=False))
    assert messages == [{"role": "user", "content": "[An image (p0.png) was attached here; this model cannot see "
                                                    "images.]\npicture 0"}]


def test_earlier_pictures_become_notes_for_a_model_that_cannot_see_but_the_newest_is_still_sent():
    messages = process_input(_conversation_with_pictures(2), images=ImagePolicy(see_earlier=False))
    assert "cannot see images" in messages[0]["content"] and _image_count(messages) == 1


def test_a_plot_goes_back_to_the_model_after_its_tool_result_only_when_asked():
    from app.domain.conversation import ToolCall

    call = ToolCall(name="python", arguments={"code": "plot()"})
    conversation = Conversation([
        Message(role="user", content="Plot it"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", tool_call_id=call.id, name="python", content="[Figure 1]",
                attachments=[Attachment(kind="image", name="Figure 1", data=png("green"))]),
    ])
    assert _image_count(process_input(conversation)) == 0
    messages = process_input(conversation, images=ImagePolicy(tool_images=True))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert _image_count(messages) == 1 and "Figure 1 from python" in messages[-1]["content"][-1]["text"]


# ----- a tiny vision-language model on transformers ---------------------------------------------------------------

def test_the_vision_model_is_recognised_and_the_text_model_is_not(tiny_vlm_client, tiny_client):
    assert tiny_vlm_client.capabilities.vision is True and tiny_vlm_client.capabilities.max_images == 4
    assert tiny_client.capabilities.vision is False
    assert type(tiny_vlm_client.model).__name__ == "Idefics3ForConditionalGeneration"


def test_the_image_reaches_the_model_as_its_image_tokens_and_pixels(tiny_vlm_client):
    prompt = tiny_vlm_client.template.prepare([image_message()], SHORT, None)
    image_id = tiny_vlm_client.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert prompt.token_ids.count(image_id) == IMAGE_TOKENS_PER_IMAGE
    assert prompt.encoded.template_token_ids.count(image_id) == 1  # what vLLM expands itself
    assert tuple(prompt.encoded.image_inputs["pixel_values"].shape[-2:]) == (32, 32)
    text = tiny_vlm_client.tokenizer.decode(prompt.token_ids)
    assert text.startswith("<|im_start|>User:<fake_token_around_image><global-img><image>")
    assert text.endswith("What colour is this?<end_of_utterance>\nAssistant:")


def test_a_streamed_answer_comes_back_and_the_vision_tower_saw_the_picture(tiny_vlm_client):
    seen: list[tuple[int, ...]] = []
    hook = tiny_vlm_client.model.model.vision_model.register_forward_hook(
        lambda module, args, kwargs, output: seen.append(tuple((args or [kwargs.get("pixel_values")])[0].shape)),
        with_kwargs=True)
    try:
        text, deltas = collect(tiny_vlm_client, [image_message()], SHORT)
    finally:
        hook.remove()
    assert text and deltas[-1].finish_reason == "length" and deltas[-1].metrics.completion_tokens == 6
    assert seen and seen[0][-2:] == (32, 32)
    assert deltas[-1].metrics.prompt_tokens > 4 + IMAGE_TOKENS_PER_IMAGE


def test_different_pictures_give_the_model_different_inputs(tiny_vlm_client):
    red = tiny_vlm_client.template.prepare([image_message(colour="red")], SHORT, None)
    blue = tiny_vlm_client.template.prepare([image_message(colour="blue")], SHORT, None)
    assert red.token_ids == blue.token_ids
    assert not red.encoded.image_inputs["pixel_values"].equal(blue.encoded.image_inputs["pixel_values"])


def test_a_text_only_conversation_still_works_on_the_vision_model(tiny_vlm_client):
    text, deltas = collect(tiny_vlm_client, [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hello"}], SHORT)
    assert text and deltas[-1].finish_reason == "length"


def test_a_text_only_model_refuses_a_picture_clearly(tiny_client):
    with pytest.raises(ClientError, match="cannot see images.*SmolVLM"):
        collect(tiny_client, [image_message()], SHORT)


def test_the_turn_ends_with_the_refusal_and_a_text_only_answer_can_follow(tiny_client):
    conversation = Conversation([Message(role="user", content="What is this?", attachments=[picture()])])
    events = list(run_turn(tiny_client, conversation, SHORT, cancel=threading.Event()))
    assert [type(e) for e in events if isinstance(e, TurnError)] == [TurnError]
    assert NO_VISION in conversation.messages[-1].error and len(conversation.messages[0].images) == 1
    conversation.rewind_to_last_user()
    events = list(run_turn(tiny_client, conversation, SHORT, images=ImagePolicy(see=False)))
    answer = next(e.message for e in events if isinstance(e, AnswerDone))
    assert answer.error is None and answer.content
    assert conversation.messages[0].images  # the picture stays in the conversation
    # The next question goes on without refusing again: the earlier picture is a note now.
    conversation.add(Message(role="user", content="And now?"))
    events = list(run_turn(tiny_client, conversation, SHORT))
    assert not [e for e in events if isinstance(e, TurnError)]


# ----- the API server and the OpenAI-compatible client ------------------------------------------------------------

@pytest.fixture(scope="module")
def vision_api(tiny_vlm_client):
    from app.config import ServerSettings
    from app.frontends.api.server_app import create_app
    from harness.local_http import serving

    with serving(create_app(ServerSettings(), client=tiny_vlm_client)) as base:
        yield base


@pytest.fixture(scope="module")
def text_api(tiny_client):
    from app.config import ServerSettings
    from app.frontends.api.server_app import create_app
    from harness.local_http import serving

    with serving(create_app(ServerSettings(), client=tiny_client)) as base:
        yield base


def _sdk(base: str):
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def test_the_server_answers_an_image_request_from_the_openai_sdk(vision_api, tiny_vlm_client):
    sdk = _sdk(vision_api)
    model = tiny_vlm_client.capabilities.model_id
    reply = sdk.chat.completions.create(model=model, messages=[image_message()], max_tokens=5, temperature=0)
    assert reply.choices[0].message.content and reply.usage.completion_tokens == 5
    expected = tiny_vlm_client.template.prepare([image_message()], SHORT, None)
    assert reply.usage.prompt_tokens == len(expected.token_ids)  # the image's tokens were in the prompt
    chunks = list(sdk.chat.completions.create(model=model, messages=[image_message()], max_tokens=5, stream=True,
                                              temperature=0))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_the_openai_backend_sends_the_pictures_as_they_are(vision_api, tiny_vlm_client):
    from app.clients.openai import OpenAIClient
    from app.config import ModelSettings

    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{vision_api}/v1"))
    assert client.capabilities.vision is None  # the server decides
    conversation = Conversation([Message(role="user", content="What is this?", attachments=[picture()])])
    events = list(run_turn(client, conversation, SHORT))
    answer = next(e.message for e in events if isinstance(e, AnswerDone))
    assert answer.error is None and answer.content
    assert answer.metrics.prompt_tokens == len(tiny_vlm_client.template.prepare(
        process_input(conversation)[:1], SHORT, None).token_ids)


def test_a_text_only_model_behind_the_server_refuses_with_a_400_that_says_why(text_api, tiny_client):
    import openai

    with pytest.raises(openai.BadRequestError, match="cannot see images"):
        _sdk(text_api).chat.completions.create(model=tiny_client.capabilities.model_id, messages=[image_message()],
                                               max_tokens=5)


def test_the_server_refuses_bad_images_and_image_urls_unless_allowed(vision_api, tiny_vlm_client, monkeypatch):
    import openai

    from harness.local_http import serve

    sdk, model = _sdk(vision_api), tiny_vlm_client.capabilities.model_id
    broken = {"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(png()[:60]).decode()}}]}
    with pytest.raises(openai.BadRequestError, match="damaged or incomplete"):
        sdk.chat.completions.create(model=model, messages=[broken], max_tokens=5)
    with serve({"/cat.png": lambda handler, body: (200, {"Content-Type": "image/png"}, png("blue"))}) as site:
        remote = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{site}/cat.png"}},
                                              {"type": "text", "text": "What is this?"}]}
        with pytest.raises(openai.BadRequestError, match="DEMO_IMAGE_URLS=1"):
            sdk.chat.completions.create(model=model, messages=[remote], max_tokens=5)
        monkeypatch.setenv("DEMO_IMAGE_URLS", "1")
        with pytest.raises(openai.BadRequestError, match="private, local or reserved address"):
            sdk.chat.completions.create(model=model, messages=[remote], max_tokens=5)
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
        reply = sdk.chat.completions.create(model=model, messages=[remote], max_tokens=5, temperature=0)
        assert reply.usage.prompt_tokens == len(tiny_vlm_client.template.prepare(
            [image_message("What is this?")], SHORT, None).token_ids)


# ----- vLLM (CPU build) ------------------------------------------------------------------------------------------

def test_vllm_sees_the_picture_and_counts_its_tokens_like_transformers(vllm_vlm, tiny_vlm_client):
    assert vllm_vlm.capabilities.vision is True
    text, deltas = collect(vllm_vlm, [image_message()], SHORT)
    assert text and deltas[-1].finish_reason == "length" and deltas[-1].metrics.completion_tokens == 6
    expected = tiny_vlm_client.template.prepare([image_message()], SHORT, None)
    assert deltas[-1].metrics.prompt_tokens == len(expected.token_ids)
    # Its engine expanded the one placeholder per image itself: the answer matches transformers' greedy one.
    assert text == collect(tiny_vlm_client, [image_message()], SHORT)[0]


# ----- a tool's picture back to the model ---------------------------------------------------------------------------

def _drawing_tools() -> ToolSettings:
    def draw() -> ToolOutput:
        """Draw a chart."""
        return ToolOutput("Drew a chart.", [Attachment(kind="image", name="Figure 1", data=png("green"))])

    registry = ToolRegistry()
    registry.register(draw)
    return ToolSettings(registry, choice="draw", max_rounds=2)


def _answer_after_the_tool(client, images: ImagePolicy | None) -> Message:
    conversation = Conversation([Message(role="user", content="Draw a chart and describe it.")])
    events = list(run_turn(client, conversation, GenerationParams(temperature=0, max_new_tokens=300),
                           tools=_drawing_tools(), images=images))
    assert not [e for e in events if isinstance(e, TurnError)]
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    return conversation.messages[-1]


def test_a_vision_model_sees_the_picture_its_tool_made_only_when_asked(tiny_vlm_client):
    without = _answer_after_the_tool(tiny_vlm_client, None)
    with_plot = _answer_after_the_tool(tiny_vlm_client, ImagePolicy(tool_images=True))
    # The second generation's prompt held the figure: its image tokens and the line that says where it is from.
    assert with_plot.metrics.prompt_tokens > without.metrics.prompt_tokens + IMAGE_TOKENS_PER_IMAGE


def test_a_tools_picture_is_never_a_reason_for_a_text_only_model_to_refuse(tiny_client):
    answer = _answer_after_the_tool(tiny_client, ImagePolicy(tool_images=True))
    assert answer.error is None


def test_pictures_are_scaled_to_what_the_image_processor_works_at_before_it_sees_them(tiny_vlm_client):
    from types import SimpleNamespace

    from app.clients.vision import within_processor_limits

    wide = Image.new("RGB", (2000, 1000), "red")
    assert within_processor_limits(wide, tiny_vlm_client.template.processor).size == (32, 16)  # longest_edge 32
    # Qwen2-VL's processors give a pixel budget ("longest_edge" 1003520 = 28*28*1280 pixels), not a side.
    qwen_like = SimpleNamespace(image_processor=SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 1003520}))
    scaled = within_processor_limits(Image.new("RGB", (4000, 2000), "red"), qwen_like)
    assert scaled.width * scaled.height <= 1003520 and abs(scaled.width / scaled.height - 2) < 0.01
    small = Image.new("RGB", (300, 200), "red")
    assert within_processor_limits(small, qwen_like).size == (300, 200)
