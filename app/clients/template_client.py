"""The base of the local backends (transformers, vLLM, llama.cpp): what they share over their ChatTemplate
(app/clients/chat_template.py), their capabilities and the whole of `stream` and `complete`, each backend starting
only its own engine."""

from __future__ import annotations

import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Generator
from pathlib import Path
from typing import Any

from app.clients.chat_template import ChatTemplate, PreparedPrompt
from app.clients.client_protocol import Capabilities, ClientError, Delta, GenerationParams, ResponseFormat, ToolRequest
from app.clients.generation_defaults import GenerationDefaults, display_name, generation_defaults
from app.clients.streaming import EngineRequest, stream_engine
from app.config import ImageSettings
from app.domain.chat_messages import ChatMessage
from app.domain.conversation import AnswerMetrics


class LocalTemplateClient(ABC):
    """Shared by the local backends (transformers, vLLM, llama.cpp): the facts of their ChatTemplate and model
    folder, and the whole of `stream` and `complete` but for starting the engine (`engine_request`)."""

    template: ChatTemplate
    model_path: Path

    @property
    def model_name(self) -> str:
        """The model's name, as the API serves it and answers record it (generation_defaults.display_name)."""
        return display_name(self.model_path)

    @functools.cached_property
    def generation_defaults(self) -> GenerationDefaults:
        return generation_defaults(self.model_name, self.model_path)

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        return Capabilities(model_id=self.model_name, native_tools=self.template.native_tools,
                            dialect=self.template.dialect.name, context_window=self.template.context_window,
                            vision=self.template.vision, thinking=self.template.thinking_markers is not None,
                            thinking_switch=self.template.thinking_switch,
                            max_images=ImageSettings.from_env().max_per_prompt if self.template.vision else None)

    @property
    def tokenizer(self) -> Any:
        return self.template.tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        return self.template.stop_token_ids

    @property
    def context_window(self) -> int:
        return self.template.context_window

    def stream(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
        response_format: ResponseFormat | None = None,
    ) -> Generator[Delta, None, None]:
        started = time.perf_counter()
        yield from self._generate(self.template.prepare(messages, params, tools, response_format), cancel, started)

    def complete(
        self,
        prompt: str | list[int],
        params: GenerationParams,
        cancel: threading.Event,
        suffix: str | None = None,
    ) -> Generator[Delta, None, None]:
        started = time.perf_counter()
        yield from self._generate(self.template.prepare_raw(prompt, params, suffix), cancel, started)

    def _generate(self, prompt: PreparedPrompt, cancel: threading.Event,
                  started: float) -> Generator[Delta, None, None]:
        """`prompt`'s reply from this backend's engine, through the one streaming path."""
        metrics = AnswerMetrics(prompt_tokens=len(prompt.token_ids), dropped_messages=prompt.dropped_messages)
        if prompt.notice:
            yield Delta(notice=prompt.notice, metrics=metrics)
        engine = self.engine_request(prompt, cancel)
        yield from stream_engine(engine, prompt.processor, cancel, metrics, self.engine_error, started)

    @abstractmethod
    def engine_request(self, prompt: PreparedPrompt, cancel: threading.Event) -> EngineRequest:
        """This backend's engine, ready to generate `prompt`."""

    @abstractmethod
    def engine_error(self, error: BaseException) -> ClientError:
        """An engine failure as an error the user can act on."""
