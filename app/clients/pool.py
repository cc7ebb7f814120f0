"""The one owner of loaded models, for every front end: Streamlit's pages (the model picker's model and Compare's
targets, one pool per process), the API server's model and the comparison CLI. One loaded client per model: users
whose settings name the same model (however its folder is spelled) share one engine (loaded once), whose batching
(transformers' continuous batching, vLLM) then serves their answers together. Before a Compare target's model loads,
its memory is checked against what the pool holds already (app/clients/memory_fit.py)."""

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
_KEPT = ""  # the user of the models `get` loads (a holder's name is never empty)


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
    """The loaded models of a process, by their model's identity (model_identity): every front end loads, shares and
    releases them here. Two ways in:

    - `get` (Compare's targets, the comparison CLI, benchmarks): the client for a model, loaded on first use after its
      memory is checked against every model the pool holds or is loading, kept until `unload` or `close`;
    - `hold` (the model a front end serves: Streamlit's model picker, the API server's model): one model per holder,
      loaded as asked without a memory check (it is the user's own choice), the holder's previous model released.

    A model several users hold (the picker's model that a Compare target asked for too) is one client, closed when
    the last of them lets go. Each model is created on first use by `factory` (create_client: the backend's module is
    imported then). Thread-safe: two users asking for the same model at once load it once, the second waiting for the
    first; different models load side by side (transformers' weight reads one at a time: transformers_loading). The
    memory check (`fits`) runs under the pool's lock, so that two tabs sending at once cannot both spend the same
    memory; a refusal is a ClientError with the figures. A failed load is not kept: the next ask tries again."""

    def __init__(self, factory: ClientFactory = create_client, fits: MemoryCheck | None = _check_memory) -> None:
        self._factory = factory
        self._fits = fits
        self._clients: dict[ModelSettings, Client] = {}
        self._loading: dict[ModelSettings, threading.Lock] = {}
        self._users: dict[ModelSettings, set[str]] = {}  # who holds each loaded model: _KEPT for `get`, or a holder
        self._held: dict[str, ModelSettings] = {}  # each holder's model
        self._lock = threading.Lock()

    def get(self, settings: ModelSettings) -> Client:
        """The client for `settings`' model, loading it if no one has (ClientError when it would not fit in memory
        beside the models held; or the backend's own error when it fails to load). The pool keeps it until `unload`
        or `close`."""
        return self._acquire(model_identity(settings), None, _KEPT)

    def hold(self, holder: str, settings: ModelSettings) -> Client:
        """The client for `settings`' model as the one model of `holder` (e.g. the model picker): shared if loaded,
        else loaded from `settings` as spelled (a local model's name is its folder's), with no memory check. The model
        the holder held before is released once this one is loaded (on a failed load it stays): closed, unless
        another user still holds it."""
        key = model_identity(settings)
        client = self._acquire(key, settings, holder)
        with self._lock:
            previous = self._held.get(holder)
            self._held[holder] = key
            stale = self._let_go(previous, holder) if previous is not None and previous != key else None
        if stale is not None:
            stale.close()
        return client

    def held(self, holder: str) -> ModelSettings | None:
        """The model `holder` holds (its identity), or None."""
        with self._lock:
            return self._held.get(holder)

    def holds(self, holder: str, settings: ModelSettings) -> bool:
        """Whether `holder` holds `settings`' model (without loading it)."""
        return self.held(holder) == model_identity(settings)

    def loaded(self) -> dict[ModelSettings, Client]:
        """The clients loaded so far, by their model's identity."""
        with self._lock:
            return dict(self._clients)

    def unload(self, settings: ModelSettings) -> bool:
        """Let go of `settings`' model for `get`'s users: closed and forgotten (its memory is freed) unless a holder
        still holds it. False when it was not kept for them."""
        key = model_identity(settings)
        with self._lock:
            if _KEPT not in self._users.get(key, ()):
                return False
            stale = self._let_go(key, _KEPT)
        if stale is not None:
            stale.close()
        return True

    def close(self) -> None:
        """Close every loaded client (their memory, their engine processes)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
            self._users.clear()
            self._held.clear()
        for client in clients:
            client.close()

    def _let_go(self, key: ModelSettings, user: str) -> Client | None:
        """Under the lock: `user` no longer holds `key`'s model; the client to close when no one else does."""
        users = self._users.get(key, set())
        users.discard(user)
        if self._held.get(user) == key:
            del self._held[user]
        if users:
            return None
        self._users.pop(key, None)
        return self._clients.pop(key, None)

    def _acquire(self, key: ModelSettings, load_as: ModelSettings | None, user: str) -> Client:
        """The client for `key`, now held by `user` too: loaded once however many ask at once, from `load_as` as
        spelled, or from `key` after `fits` checked its memory when `load_as` is None."""
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._users[key].add(user)
                return client
            loading = self._loading.get(key)
            if loading is None:
                if load_as is None and self._fits is not None:
                    try:
                        self._fits(key, {*self._clients, *self._loading})
                    except DoesNotFit as exc:
                        raise ClientError(f"Not loaded: {exc}") from exc
                loading = self._loading[key] = threading.Lock()
        with loading:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    self._loading[key] = loading  # reserved while it loads (again, if the first try failed)
                else:
                    self._users[key].add(user)
            if client is None:
                try:
                    client = self._factory(key if load_as is None else load_as)
                except BaseException:
                    with self._lock:
                        if self._loading.get(key) is loading:
                            del self._loading[key]
                    raise
                with self._lock:
                    self._clients[key] = client
                    self._users[key] = {user}
                    self._loading.pop(key, None)
            return client
