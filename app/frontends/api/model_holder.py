"""The one backend an API server serves, and the name clients ask for it by."""

from __future__ import annotations

import threading

from app.clients.backends import create_client
from app.clients.client_protocol import Client
from app.config import ModelSettings
from app.frontends.api.chat_completions.chat_protocol import APIError


class ModelHolder:
    """The one backend of this server, loaded at start-up on a thread so /health answers meanwhile; or, handed a
    loaded `client` (tests, benchmarks), that one."""

    def __init__(self, settings: ModelSettings, client: Client | None, served_name: str | None) -> None:
        self.client, self.served_name = client, served_name
        self.error: str | None = None  # why loading failed
        if client is None:
            threading.Thread(target=self._load, args=(settings,), daemon=True).start()
        elif not served_name:
            self.served_name = _default_name(client)

    def _load(self, settings: ModelSettings) -> None:
        try:
            client = create_client(settings)
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
