"""generate_image against a local server that speaks the OpenAI images protocol (the real APIs need keys)."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from app.tools.images import ImageAPI
from app.tools.session import SessionTools
from app.tools.tool_registry import ToolError
from harness.local_http import json_reply, serve


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def images_api():
    requests = []

    def generations(handler, body):
        request = json.loads(body)
        requests.append((handler.headers.get("Authorization"), request))
        if handler.headers.get("Authorization") != "Bearer good-key":
            return json_reply({"error": {"message": "Incorrect API key provided"}}, 401)
        if request["model"] == "cogview-4":  # CogView answers with a link to the picture
            base = f"http://127.0.0.1:{handler.server.server_address[1]}"
            return json_reply({"created": 1, "data": [{"url": f"{base}/files/picture.png"}]})
        return json_reply({"created": 1, "data": [{"b64_json": base64.b64encode(png()).decode(),
                                                   "revised_prompt": "a red square, minimalist"}]})

    routes = {"/v1/images/generations": generations,
              "/files/picture.png": lambda h, b: (200, {"Content-Type": "image/png"}, png())}
    with serve(routes) as base:
        yield f"{base}/v1", requests


def test_openai_style_base64_answer(images_api):
    url, requests = images_api
    output = ImageAPI(url, "good-key", "dall-e-3", "1024x1024").generate_image("a red square")
    assert output.attachments[0].kind == "image" and output.attachments[0].data == png()
    assert "a red square, minimalist" in output.text
    assert requests[-1][1] == {"model": "dall-e-3", "prompt": "a red square", "n": 1, "size": "1024x1024"}


def test_cogview_style_url_answer(images_api):
    url, _ = images_api
    output = ImageAPI(url, "good-key", "cogview-4", "1024x1024").generate_image("a red square")
    assert output.attachments[0].data == png()


def test_a_bad_key_is_a_clear_error(images_api):
    url, _ = images_api
    with pytest.raises(ToolError, match="refused the API key"):
        ImageAPI(url, "wrong", "dall-e-3", "1024x1024").generate_image("x")


def test_the_tool_is_offered_only_when_configured(monkeypatch, images_api):
    monkeypatch.delenv("DEMO_IMAGE_API_URL", raising=False)
    tools = SessionTools()
    try:
        assert "generate_image" not in tools.registry().names
    finally:
        tools.close()
    monkeypatch.setenv("DEMO_IMAGE_API_URL", images_api[0])
    monkeypatch.setenv("DEMO_IMAGE_API_KEY", "good-key")
    tools = SessionTools()
    try:
        result = tools.registry().call("generate_image", {"prompt": "a red square"})
        assert result.ok and result.attachments[0].data == png()
    finally:
        tools.close()
