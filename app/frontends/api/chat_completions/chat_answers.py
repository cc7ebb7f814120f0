"""The API server's answers, as `openai.types.chat` models: a whole completion, or the chunks of a stream (the
role first, then content and `delta.tool_calls` pieces as they are generated, the finish reason, usage). A reasoning
model's thought goes under both names clients read: `reasoning_content` (vLLM's first name for it, DeepSeek's API)
and `reasoning` (newer vLLM, and the clients written for it)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionMessageToolCallUnion,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall, ChoiceDeltaToolCallFunction
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function
from openai.types.completion_usage import PromptTokensDetails

from app.clients.client_protocol import Delta
from app.domain.conversation import AnswerMetrics, CallFragment, PartialCalls

FinishReason = Literal["stop", "length", "tool_calls"]


def finish_reason(delta: Delta | None) -> FinishReason:
    reason = delta.finish_reason if delta is not None else None
    return reason if reason in ("length", "tool_calls") else "stop"  # type: ignore[return-value]


@dataclass
class Reply:
    """One reply as its deltas come in: the identity every chunk repeats, and what the deltas add up to."""

    model: str
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: PartialCalls = field(default_factory=PartialCalls)  # as far as their fragments got
    last: Delta | None = None

    def add(self, delta: Delta) -> None:
        self.last = delta
        self.text.append(delta.text)
        self.thinking.append(delta.thinking)
        for fragment in delta.call_fragments:
            self.calls.add(fragment)

    @property
    def metrics(self) -> AnswerMetrics:
        return self.last.metrics if self.last is not None else AnswerMetrics()

    def usage(self) -> CompletionUsage:
        metrics = self.metrics
        prompt, completion = metrics.prompt_tokens, metrics.completion_tokens
        return CompletionUsage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                               prompt_tokens_details=PromptTokensDetails(cached_tokens=metrics.cached_tokens))

    def completion(self) -> ChatCompletion:
        """The whole reply. Finished calls as the model made them; a call cut at the token limit as far as it got
        (finish_reason "length"), as OpenAI's API does."""
        finished = self.last.tool_calls if self.last is not None else []
        calls: list[ChatCompletionMessageToolCallUnion] = [
            ChatCompletionMessageFunctionToolCall(id=call.id, type="function", function=Function(
                name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False))) for call in finished] or [
            ChatCompletionMessageFunctionToolCall(id=partial.id, type="function", function=Function(
                name=partial.name, arguments=partial.arguments)) for partial in self.calls]
        text, thought = "".join(self.text), "".join(self.thinking).strip()
        message = ChatCompletionMessage(role="assistant", content=text or (None if calls else ""),
                                        tool_calls=calls or None)
        if thought:  # a reasoning model's thought: extra fields of the message, as vLLM's server sends it
            message.reasoning_content = message.reasoning = thought  # type: ignore[attr-defined]
        return ChatCompletion(id=self.id, object="chat.completion", created=self.created, model=self.model,
                              choices=[Choice(index=0, message=message, finish_reason=finish_reason(self.last),
                                              logprobs=None)],
                              usage=self.usage())

    def chunk(self, delta: ChoiceDelta | None = None, finish: FinishReason | None = None,
              usage: CompletionUsage | None = None) -> ChatCompletionChunk:
        """One chunk of the stream: a delta (with its finish reason), or the usage-only chunk with no choices."""
        choices = [] if delta is None else [ChunkChoice(index=0, delta=delta, finish_reason=finish, logprobs=None)]
        return ChatCompletionChunk(id=self.id, object="chat.completion.chunk", created=self.created,
                                   model=self.model, choices=choices, usage=usage)

    def chunks(self, delta: Delta) -> list[ChatCompletionChunk]:
        """What one core delta adds to the stream: its thought, its text, then its tool-call pieces."""
        out = []
        if delta.thinking:
            out.append(self.chunk(ChoiceDelta(reasoning_content=delta.thinking,  # type: ignore[call-arg]
                                              reasoning=delta.thinking)))
        if delta.text:
            out.append(self.chunk(ChoiceDelta(content=delta.text)))
        if delta.call_fragments:
            out.append(self.chunk(ChoiceDelta(tool_calls=[_tool_call_delta(f) for f in delta.call_fragments])))
        return out


def _tool_call_delta(fragment: CallFragment) -> ChoiceDeltaToolCall:
    """Only the fields this piece has: chunks are sent without unset fields, and an explicit null would overwrite
    the id, type or name that SDKs accumulated from the first piece."""
    if fragment.name is not None:
        return ChoiceDeltaToolCall(index=fragment.index, id=fragment.id, type="function",
                                   function=ChoiceDeltaToolCallFunction(name=fragment.name,
                                                                        arguments=fragment.arguments))
    return ChoiceDeltaToolCall(index=fragment.index, function=ChoiceDeltaToolCallFunction(arguments=fragment.arguments))
