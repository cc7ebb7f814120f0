"""The one model an API server serves, and the name clients ask for it by: loaded through the server's ClientPool
(app/clients/pool.py, the owner of loaded models) on a thread, so that /health answers meanwhile."""

from __future__ import annotations

import threading

from app.clients.client_protocol import Client
from app.clients.pool import ClientPool
from app.config import ModelSettings
from app.frontends.api.chat_completions.chat_protocol import APIError

SERVED = "API server"  # the pool's holder of the served model


class ModelHolder:
    """The one model of this server, loaded at start-up into the server's pool on a thread so /health answers
    meanwhile; or, handed a loaded `client` (tests, benchmarks), that one."""

    def __init__(self, settings: ModelSettings, client: Client | None, served_name: str | None) -> None:
        self.client, self.served_name = client, served_name
        self.error: str | None = None  # why loading failed
        self.pool = ClientPool()  # the server's models: the one it serves
        if client is None:
            threading.Thread(target=self._load, args=(settings,), daemon=True).start()
        elif not served_name:
            self.served_name = _default_name(client)

    def _load(self, settings: ModelSettings) -> None:
        try:
            client = self.pool.hold(SERVED, settings)
        except Exception as exc:  # reported by /health and as 503, the server stays up
            self.error = str(exc)
            return
        self.served_name = self.served_name or _default_name(client)
        self.client = client

    def require(self) -> Client:
        """The loaded client; a 503 while it loads or after it failed to."""
        if self.client is None:
            message = f"The model is not loaded: {self.error}" if self.error else "The model is still loading."
            raise APIError(503, message, kind="service_unavailable")
        return self.client


def _default_name(client: Client) -> str:
    return client.capabilities.model_id
