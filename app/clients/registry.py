"""Backends by name. A front end asks `create_client(settings)`; caching one instance per process is its job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.clients.base import Client, ClientError
from app.config import ModelSettings


@dataclass(frozen=True)
class Backend:
    name: str
    label: str
    factory: Callable[[ModelSettings], Client]


def _hf(settings: ModelSettings) -> Client:
    from app.clients.hf.client import HFClient  # imports torch: only when this backend is chosen

    return HFClient(settings)


def _vllm(settings: ModelSettings) -> Client:
    from app.clients.vllm import VLLMClient  # imports vLLM: only when this backend is chosen

    return VLLMClient(settings)


def _openai(settings: ModelSettings) -> Client:
    from app.clients.openai import OpenAIClient

    return OpenAIClient(settings)


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend("hf", "Hugging Face transformers", _hf),
        Backend("vllm", "vLLM (in process)", _vllm),
        Backend("openai", "OpenAI-compatible API", _openai),
    )
}


def create_client(settings: ModelSettings) -> Client:
    backend = BACKENDS.get(settings.backend)
    if backend is None:
        raise ClientError(f"Unknown backend {settings.backend!r}; choose one of: {', '.join(BACKENDS)}.")
    return backend.factory(settings)
