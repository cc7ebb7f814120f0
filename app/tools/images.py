"""Image generation over an API speaking OpenAI's `POST /images/generations` (OpenAI, ZhipuAI CogView, LocalAI,
vLLM-Omni...). Configured by DEMO_IMAGE_API_URL (base URL, e.g. https://open.bigmodel.cn/api/paas/v4),
DEMO_IMAGE_API_KEY and DEMO_IMAGE_MODEL (e.g. cogview-4, dall-e-3); without a URL the tool is not offered.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import ClassVar

import httpx

from app.config import ImageApiSettings
from app.domain.conversation import Attachment
from app.tools.tool_registry import ToolError, ToolHints, ToolOutput

TIMEOUT_S = 120.0
MAX_IMAGE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class ImageAPI:
    base_url: str
    api_key: str
    model: str
    size: str

    # Each call makes a new picture on the service (spending its quota; some keep it on their storage): it changes
    # something out there, only ever by adding, and a second call makes another picture.
    HINTS: ClassVar[ToolHints] = ToolHints(read_only=False, destructive=False, idempotent=False, open_world=True,
                                           title="Generate an image")

    @classmethod
    def from_env(cls) -> ImageAPI | None:
        """The API configured in the environment (see ImageApiSettings), or None when no URL is set."""
        settings = ImageApiSettings.from_env()
        if not settings.url:
            return None
        return cls(base_url=settings.url.rstrip("/"), api_key=settings.api_key, model=settings.model,
                   size=settings.size)

    def generate_image(self, prompt: str) -> ToolOutput:
        """Draw a picture from a description and show it to the user.

        Args:
            prompt: A detailed description of the picture.
        """
        if not prompt.strip():
            raise ToolError("the image description is empty.")
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        request = {"model": self.model, "prompt": prompt.strip(), "n": 1, "size": self.size}
        try:
            with httpx.Client(timeout=TIMEOUT_S) as http:
                response = http.post(f"{self.base_url}/images/generations", json=request, headers=headers)
                if response.status_code in (401, 403):
                    raise ToolError("the image service refused the API key (DEMO_IMAGE_API_KEY).")
                if response.status_code >= 400:
                    raise ToolError(f"the image service answered HTTP {response.status_code}: {_error_text(response)}")
                item = (response.json().get("data") or [{}])[0]
                image = self._image_bytes(http, item)
        except (httpx.ConnectError, httpx.TimeoutException, httpx.NetworkError) as exc:
            reason = type(exc).__name__
            raise ToolError(f"the image service at {self.base_url} could not be reached ({reason}).") from None
        except ValueError:
            raise ToolError("the image service sent an answer that is not JSON.") from None
        revised = item.get("revised_prompt") or prompt.strip()
        return ToolOutput(f"The image was generated and shown to the user. It shows: {revised}",
                          [Attachment(kind="image", name=prompt.strip()[:80], data=image)])

    @staticmethod
    def _image_bytes(http: httpx.Client, item: dict) -> bytes:
        if item.get("b64_json"):
            return base64.b64decode(item["b64_json"])
        if item.get("url"):  # CogView answers with a link to the picture on its own storage
            response = http.get(item["url"])
            if response.status_code >= 400:
                raise ToolError(f"the generated image could not be downloaded (HTTP {response.status_code}).")
            if len(response.content) > MAX_IMAGE_BYTES:
                raise ToolError("the generated image is too large.")
            return response.content
        raise ToolError("the image service answered without an image.")


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        return str(error.get("message") if isinstance(error, dict) else error or response.text[:200])
    except ValueError:
        return response.text[:200]
