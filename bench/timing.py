"""Timing one streamed answer, shared by the benchmarks: when it was sent, when its first and last text arrived and
how many tokens it had, through a client in process or through an OpenAI-compatible server (openai SDK). Greedy,
exactly `tokens` new tokens where the path can ignore EOS."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Sample:
    sent: float
    first: float
    last: float
    tokens: int

    @property
    def ttft(self) -> float:
        return self.first - self.sent

    @property
    def decode_tps(self) -> float:
        return (self.tokens - 1) / (self.last - self.first) if self.last > self.first else float("nan")


def time_client_stream(client: Any, messages: list[dict[str, Any]], tokens: int) -> Sample:
    """Through `client.stream`, EOS ignored; `tokens` is the client's own completion count."""
    from app.clients.client_protocol import GenerationParams

    params = GenerationParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    sent = time.perf_counter()
    first = last = None
    final = None
    for delta in client.stream(messages, params, threading.Event()):
        if delta.text:
            last = time.perf_counter()
            first = first or last
        final = delta
    assert final is not None and first is not None and last is not None
    return Sample(sent, first, last, final.metrics.completion_tokens)


def time_server_stream(sdk: Any, model: str, messages: list[dict[str, Any]], tokens: int,
                       extra_body: dict[str, Any] | None = None) -> Sample:
    """Through a chat completion stream; `tokens` is the server's usage count."""
    sent = time.perf_counter()
    first = last = None
    count = 0
    for chunk in sdk.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=tokens,
                                             stream=True, stream_options={"include_usage": True},
                                             extra_body=extra_body):
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            count = chunk.usage.completion_tokens
    assert first is not None and last is not None
    return Sample(sent, first, last, count)
