"""One loaded client per backend and model: targets on equal ModelSettings share one engine (loaded once), whose
batching (transformers' continuous batching, vLLM) then serves their answers together."""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.clients.base import Client
from app.clients.registry import create_client
from app.config import ModelSettings

ClientFactory = Callable[[ModelSettings], Client]


class ClientPool:
    """Clients by their settings, each created on first use by `factory` (create_client: the backend's module is
    imported then). Thread-safe: two targets asking for the same settings at once load it once, the second waiting
    for the first; different settings load side by side. A failed load is not kept: the next ask tries again."""

    def __init__(self, factory: ClientFactory = create_client) -> None:
        self._factory = factory
        self._clients: dict[ModelSettings, Client] = {}
        self._loading: dict[ModelSettings, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, settings: ModelSettings) -> Client:
        """The client for `settings`, loading it if no one has (ClientError, or the backend's own error, if that
        fails)."""
        with self._lock:
            client = self._clients.get(settings)
            if client is not None:
                return client
            loading = self._loading.setdefault(settings, threading.Lock())
        with loading:
            with self._lock:
                client = self._clients.get(settings)
            if client is None:
                client = self._factory(settings)
                with self._lock:
                    self._clients[settings] = client
            return client

    def loaded(self) -> dict[ModelSettings, Client]:
        """The clients loaded so far, by their settings."""
        with self._lock:
            return dict(self._clients)

    def unload(self, settings: ModelSettings) -> bool:
        """Close the client for `settings` and forget it (its memory is freed); False when none is loaded."""
        with self._lock:
            client = self._clients.pop(settings, None)
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
