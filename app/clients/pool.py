"""One loaded client per model: targets whose settings name the same model (however its folder is spelled) share one
engine (loaded once), whose batching (transformers' continuous batching, vLLM) then serves their answers together.
Before a model loads, its memory is checked against what the pool holds already (app/clients/memory_fit.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection
from dataclasses import replace

from app.clients.backends import create_client
from app.clients.client_protocol import Client, ClientError
from app.clients.embedded_model import is_embedded
from app.clients.memory_fit import DoesNotFit, check_fit
from app.config import ModelSettings

ClientFactory = Callable[[ModelSettings], Client]
# Raises DoesNotFit when the model (first argument) cannot be loaded beside the ones held (second).
MemoryCheck = Callable[[ModelSettings, Collection[ModelSettings]], object]


def model_identity(settings: ModelSettings) -> ModelSettings:
    """The settings with the model named one way only, so that equal models compare equal: a local model's path
    resolved (`~`, `.`, `..`, a trailing slash, symbolic links: /x/model, /x/model/, /x/./model and a link to it are
    one model), the embedded model's blank path empty, and for a remote server the path dropped (its name is its
    URL and model name). The backend and every other setting stay: they make another engine."""
    if settings.backend == "openai":
        return replace(settings, model_path="", api_base_url=settings.api_base_url.strip().rstrip("/"),
                       api_model=settings.api_model.strip())
    if is_embedded(settings.model_path):
        return replace(settings, model_path="")
    return replace(settings, model_path=os.path.realpath(os.path.expanduser(settings.model_path.strip())))


def _check_memory(settings: ModelSettings, held: Collection[ModelSettings]) -> None:
    check_fit([settings], held)


class ClientPool:
    """Clients by their model's identity (model_identity), each created on first use by `factory` (create_client:
    the backend's module is imported then). Thread-safe: two targets asking for the same model at once load it
    once, the second waiting for the first; different models load side by side. Before a model loads, `fits`
    checks it against every model the pool holds or is loading (and those `get` is told are held elsewhere), under
    the pool's lock, so that two tabs sending at once cannot both spend the same memory; a refusal is a ClientError
    with the figures. A failed load is not kept: the next ask tries again."""

    def __init__(self, factory: ClientFactory = create_client, fits: MemoryCheck | None = _check_memory) -> None:
        self._factory = factory
        self._fits = fits
        self._clients: dict[ModelSettings, Client] = {}
        self._loading: dict[ModelSettings, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, settings: ModelSettings, held_elsewhere: Collection[ModelSettings] = ()) -> Client:
        """The client for `settings`' model, loading it if no one has (ClientError when it would not fit in memory
        beside the models held, here and `held_elsewhere`; or the backend's own error when it fails to load)."""
        key = model_identity(settings)
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                return client
            loading = self._loading.get(key)
            if loading is None:
                if self._fits is not None:
                    held = {*self._clients, *self._loading, *(model_identity(s) for s in held_elsewhere)}
                    try:
                        self._fits(key, held)
                    except DoesNotFit as exc:
                        raise ClientError(f"Not loaded: {exc}") from exc
                loading = self._loading[key] = threading.Lock()
        with loading:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    self._loading[key] = loading  # reserved while it loads (again, if the first try failed)
            if client is None:
                try:
                    client = self._factory(key)
                except BaseException:
                    with self._lock:
                        if self._loading.get(key) is loading:
                            del self._loading[key]
                    raise
                with self._lock:
                    self._clients[key] = client
                    self._loading.pop(key, None)
            return client

    def loaded(self) -> dict[ModelSettings, Client]:
        """The clients loaded so far, by their model's identity."""
        with self._lock:
            return dict(self._clients)

    def unload(self, settings: ModelSettings) -> bool:
        """Close the client for `settings`' model and forget it (its memory is freed); False when none is loaded."""
        with self._lock:
            client = self._clients.pop(model_identity(settings), None)
        if client is None:
            return False
        client.close()
        return True

    def close(self) -> None:
        """Close every loaded client (their memory, their engine processes)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
