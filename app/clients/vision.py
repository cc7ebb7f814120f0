"""Vision-language models on the local backends (transformers, vLLM): recognising one, loading its processor, and
turning the pictures in OpenAI messages into what its chat template and processor take. One code path for every
family transformers supports: the processor expands each image placeholder the chat template writes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from app.clients.client_protocol import ClientError
from app.domain.chat_messages import ChatMessage, TemplateMessage
from app.domain.media import ImageError, fit_within, from_data_url, open_rgb

VISION_MODEL_EXAMPLES = ("SmolVLM-256M-Instruct or SmolVLM-500M-Instruct on a CPU; Qwen2.5-VL-7B-Instruct or "
                         "Gemma 3 with vLLM on a GPU")
NO_VISION = ("This model cannot see images. Load a vision-language model to ask about pictures "
             f"({VISION_MODEL_EXAMPLES}), or answer the text only.")
_AREA_LIMIT = 8192  # a processor "longest_edge" above this is a pixel count (Qwen2-VL's max_pixels), not a side


def is_vision_config(config: Any) -> bool:
    """A model transformers loads with AutoModelForImageTextToText (SmolVLM/Idefics3, Qwen2.5-VL, Gemma 3, LLaVA...)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return getattr(config, "model_type", None) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def load_processor(model_path: Path) -> Any:
    """The model's processor (tokenizer + image processor + its chat template)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(model_path)
    except Exception as exc:  # loaders raise many types; a missing optional package among them
        raise ClientError(f"Could not load the image processor of {model_path.name}: {exc}") from exc
    if getattr(processor, "image_processor", None) is None:
        raise ClientError(f"{model_path.name} is a vision-language model but its folder has no image processor "
                          "(preprocessor_config.json / processor_config.json).")
    return processor


def has_images(messages: Sequence[ChatMessage]) -> bool:
    return any(part.get("type") == "image_url" for message in messages for part in _parts(message))


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []


class PromptImages:
    """The pictures of one prompt: each data URL decoded once (a prompt is rendered several times while it is
    fitted into the context window), scaled down to what the image processor works at."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self._decoded: dict[str, Image.Image] = {}

    def template_messages(self, messages: Sequence[TemplateMessage]) -> tuple[list[TemplateMessage], list[Image.Image]]:
        """Messages for a vision chat template, and their images in order. Every content becomes a list of parts
        (vision templates iterate over parts; SmolVLM's cannot render a plain string) and an image part the
        template's own {"type": "image"} placeholder."""
        out: list[TemplateMessage] = []
        images: list[Image.Image] = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, list):
                parts = []
                for part in content:
                    if part.get("type") == "image_url":
                        images.append(self._image(part["image_url"]["url"]))
                        parts.append({"type": "image"})
                    else:
                        parts.append(part)
            else:
                parts = [{"type": "text", "text": content or ""}]
            out.append({**message, "content": parts})
        return out, images

    def _image(self, url: str) -> Image.Image:
        if url not in self._decoded:
            try:
                self._decoded[url] = within_processor_limits(open_rgb(from_data_url(url)), self.processor)
            except ImageError as exc:
                raise ClientError(f"An image in the conversation cannot be used: {exc}") from exc
        return self._decoded[url]

    def encode(self, text: str, images: list[Image.Image]) -> tuple[list[int], dict[str, Any]]:
        """Token ids with each image placeholder expanded to the image's tokens, and the processor's tensors for
        the vision tower (pixel_values and what the family needs besides)."""
        encoded = self.processor(text=text, images=images, add_special_tokens=False, return_tensors="pt")
        token_ids = encoded["input_ids"][0].tolist()
        tensors = {key: value for key, value in encoded.items() if key not in ("input_ids", "attention_mask")}
        return token_ids, tensors


def within_processor_limits(image: Image.Image, processor: Any) -> Image.Image:
    """`image` no bigger than the image processor works at: it would scale it down itself, but only after
    turning the full-size picture into float arrays."""
    image_processor = processor.image_processor
    size = getattr(image_processor, "size", None) or {}
    longest = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    max_pixels = getattr(image_processor, "max_pixels", None)
    if isinstance(longest, int) and longest > _AREA_LIMIT:
        max_pixels = max_pixels or longest
        longest = None
    if isinstance(max_pixels, int) and image.width * image.height > max_pixels:
        scale = math.sqrt(max_pixels / (image.width * image.height))
        image = image.resize((max(1, int(image.width * scale)), max(1, int(image.height * scale))),
                             Image.Resampling.LANCZOS)
    if isinstance(longest, int) and longest > 0:
        image = fit_within(image, longest)
    return image
