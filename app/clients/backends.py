"""Backends by name. A front end asks `create_client(settings)`; caching one instance per process is its job.

A new backend is a module (or package) with a Client class taking ModelSettings, plus one line in BACKENDS (an
app/registry.py table). The class is named by its import path and imported only when its backend is chosen: the
transformers backend imports torch, the vLLM one vLLM, and the sidebar lists them all without loading either.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.clients.client_protocol import Client, ClientError
from app.config import ModelSettings
from app.registry import Registry, load


@dataclass(frozen=True)
class Backend:
    name: str  # ModelSettings.backend
    label: str  # as the sidebar shows it
    client: str  # "module:Class" of its Client, whose __init__ takes the ModelSettings

    def factory(self, settings: ModelSettings) -> Client:
        """Load this backend's module (only now) and start its client."""
        client: Client = load(self.client)(settings)
        return client


BACKENDS: Registry[Backend] = Registry("backend")
for _backend in (
    Backend("hf", "Hugging Face transformers", "app.clients.hf.hf_client:HFClient"),
    Backend("vllm", "vLLM (in process)", "app.clients.vllm:VLLMClient"),
    Backend("llamacpp", "llama.cpp (GGUF)", "app.clients.llamacpp.llamacpp_client:LlamaCppClient"),
    Backend("openai", "OpenAI-compatible API", "app.clients.openai:OpenAIClient"),
):
    BACKENDS.add(_backend.name, _backend)


def create_client(settings: ModelSettings) -> Client:
    backend = BACKENDS.get(settings.backend)
    if backend is None:
        raise ClientError(f"Unknown backend {settings.backend!r}; choose one of: {', '.join(BACKENDS)}.")
    return backend.factory(settings)
