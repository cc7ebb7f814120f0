"""The llama.cpp engine (GGUF files) through llama-cpp-python, the maintained binding, in a process of its own.

The prompt is built here, in the app, as for the other local engines (app/clients/chat_template.py): the GGUF's own chat
template, rendered with the tokenizer transformers reads from the same file, so the dialects, the context fitting
and the grammars are the ones every local backend uses. The runner process (app/clients/llamacpp/runner.py) only
evaluates token ids, samples, masks by grammar and keeps the prompt cache; a crash there is an error for the replies
in flight and a restart for the next one, never the end of the app (app/clients/llamacpp/engine.py).

One llama.cpp context holds one sequence, so replies take turns on it, in the order they came. A reply reuses the
keys and values of the longest prefix it shares with the live sequence or with the kept sequences of other
conversations (app/clients/llamacpp/cache.py): a conversation's next turn reads only its new messages, also when
another conversation was answered in between.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import psutil

from app.clients.chat_template import ChatTemplate, PreparedPrompt
from app.clients.client_protocol import ClientError, GenerationParams, ModelActivity, ToolRequest
from app.clients.embedded_model import FOLDER_NAME, gguf_path, is_embedded
from app.clients.llamacpp.engine import EngineProcess, EngineStopped
from app.clients.prefix_store import MIN_REUSE, PromptCacheStats
from app.clients.streaming import EngineFeed, EngineOutput, EngineRequest
from app.clients.template_client import LocalTemplateClient
from app.config import ModelSettings
from app.domain.chat_messages import ChatMessage

log = logging.getLogger(__name__)

INSTALL_HINT = "llama-cpp-python is not installed: run `make setup-llamacpp` (it builds the binding for this CPU)."


def resolve_gguf(model_path: str) -> Path:
    """A .gguf file, or a folder holding exactly one; an empty path is the embedded SmolLM2's GGUF, used as it is."""
    if is_embedded(model_path):
        return gguf_path()
    path = Path(model_path.strip()).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.glob("*.gguf") if "mmproj" not in p.name)
        if len(found) != 1:
            raise ClientError(f"{str(path)!r} holds {len(found)} .gguf model files: point to the one to load.")
        path = found[0]
    if not path.is_file() or path.suffix != ".gguf":
        raise ClientError(f"{str(path)!r} is not a .gguf file. Enter the path of a GGUF model file (or a folder with "
                          "one), or clear the field to use the embedded SmolLM2.")
    return path


def default_threads() -> int:
    """llama-server's choice: one thread per physical core this process may use. (llama-cpp-python's own default,
    half the logical CPUs, ran SmolLM2 on 1 thread of a 2-core machine, at 0.6x the speed of 2.)"""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(psutil.cpu_count(logical=False) or usable, usable))


class LlamaCppClient(LocalTemplateClient):
    backend = "llamacpp"

    def __init__(self, settings: ModelSettings) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ClientError(INSTALL_HINT)
        from transformers import AutoTokenizer

        self.settings = settings
        self.model_path = resolve_gguf(settings.model_path)
        self.threads = settings.llamacpp_threads or default_threads()
        config = {"model_path": str(self.model_path), "n_ctx": settings.max_context_tokens,
                  "threads": self.threads, "gpu_layers": settings.llamacpp_gpu_layers,
                  "cache_bytes": settings.prompt_cache_mb * 2**20}
        try:
            # The file is read by llama.cpp first, in the runner: a damaged or hostile one can only end that process.
            self.engine = EngineProcess(config)
        except EngineStopped as exc:
            raise ClientError(f"llama.cpp could not load {self.model_path}: {exc}") from exc
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(self.model_path.parent), gguf_file=self.model_path.name)
        except Exception as exc:  # transformers' GGUF reader on a file llama.cpp took: an architecture it lacks
            self.engine.close()
            raise ClientError(f"The tokenizer of {self.model_path} could not be read: {exc}") from exc
        self.template = ChatTemplate(tokenizer, [int(self.engine.info["eos"])], int(self.engine.info["n_ctx"]))
        self._waiting = 0
        self._generating = 0
        self._count_lock = threading.Lock()
        self._warmed: set[str] = set()

    @property
    def model_name(self) -> str:
        """The embedded model keeps its one name on every engine ("SmolLM2-135M-Instruct", not its GGUF's file name),
        so that API clients and the README's examples need not know which engine serves it."""
        return FOLDER_NAME if is_embedded(self.settings.model_path) else self.model_path.name

    def describe(self) -> str:
        cache = f" · prompt cache {self.settings.prompt_cache_mb} MB" if self.settings.prompt_cache_mb else ""
        restarts = f" · engine restarted {self.engine.restarts}×" if self.engine.restarts else ""
        return (f"llama.cpp · {self.model_path.name} · context {self.context_window} · "
                f"{self.threads} threads · {self.settings.llamacpp_gpu_layers} GPU layers{cache}{restarts}")

    def engine_request(self, prompt: PreparedPrompt, cancel: threading.Event) -> EngineRequest:
        return _Request(self, prompt)

    def engine_error(self, error: BaseException) -> ClientError:
        return ClientError.engine_failed("llama.cpp", error)

    def activity(self) -> ModelActivity:
        with self._count_lock:
            return ModelActivity(generating=self._generating, waiting=self._waiting, at_once=1)

    def _count(self, waiting: int, generating: int) -> None:
        with self._count_lock:
            self._waiting += waiting
            self._generating += generating

    def warm(self, messages: list[ChatMessage], params: GenerationParams, tools: ToolRequest | None) -> None:
        """Have the runner read what every turn after `messages` starts with (up to the user's first words), once
        per distinct beginning; it does so only while no reply waits (app/clients/client_protocol.py's
        PromptWarming)."""
        if not self.settings.prompt_cache_mb:
            return
        key = json.dumps([messages, tools.active_tools if tools else None, params.thinking], sort_keys=True,
                         default=str)
        with self._count_lock:
            if key in self._warmed:
                return
            self._warmed.add(key)
        try:
            first, second = (self.template.render([*messages, {"role": "user", "content": word}], tools,
                                                  thinking=params.thinking).token_ids for word in ("a", "b"))
        except Exception:  # a template that cannot render this: nothing to warm, the turn will say what is wrong
            return
        shared = next((i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y), 0)
        if shared >= MIN_REUSE:
            self.engine.warm(first[:shared])

    def prompt_cache_stats(self) -> PromptCacheStats:
        """The runner's prompt cache figures (all zero while it restarts)."""
        reply = self.engine.stats()
        return PromptCacheStats(**{name: int(reply.get(name, 0)) for name in PromptCacheStats.__dataclass_fields__})

    def close(self) -> None:
        self.engine.close()


class _Request:
    """One reply, queued on the runner: its outputs reach the feed from the engine's reader thread."""

    def __init__(self, client: LlamaCppClient, prompt: PreparedPrompt) -> None:
        self.client, self.prompt = client, prompt
        self._id: int | None = None
        self._aborted = False
        self._lock = threading.Lock()

    def start(self, feed: EngineFeed) -> None:
        # (Re)starting a runner takes seconds: on a thread of its own, so the consumer keeps its heartbeats.
        threading.Thread(target=self._submit, args=(feed,), name="llamacpp-submit", daemon=True).start()

    def _submit(self, feed: EngineFeed) -> None:
        client, params = self.client, self.prompt.params
        try:
            notice = client.engine.ensure_running()
        except EngineStopped as exc:
            feed.fail(EngineStopped(f"the engine could not be started again: {exc}"))
            feed.close()
            return
        if notice:
            feed.put(EngineOutput(notice=notice))
        request: dict[str, Any] = {
            "tokens": list(self.prompt.token_ids), "max_new_tokens": self.prompt.max_new_tokens,
            "stop_ids": client.stop_token_ids, "grammar": self.prompt.grammar,
            "params": {"temperature": 0.0 if params.greedy else params.temperature, "top_p": params.top_p,
                       "top_k": params.top_k, "repeat_penalty": params.repetition_penalty, "seed": params.seed,
                       "ignore_eos": params.ignore_eos},
        }
        client._count(1, 0)
        counted = threading.Event()

        def started() -> None:  # called once, by the reader thread (or by submit when the engine is gone)
            if not counted.is_set():
                counted.set()
                client._count(-1, 1)

        def ended() -> None:
            if counted.is_set():
                client._count(0, -1)
            else:
                counted.set()
                client._count(-1, 0)

        with self._lock:
            self._id = client.engine.submit(request, _CountingFeed(feed, ended), started)
            aborted = self._aborted
        if aborted:
            client.engine.abort(self._id)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            request_id = self._id
        if request_id is not None:
            self.client.engine.abort(request_id)


class _CountingFeed(EngineFeed):
    """A feed that calls `on_close` when the engine closes it (the reply leaves the client's activity count)."""

    def __init__(self, inner: EngineFeed, on_close: Any) -> None:
        self._inner, self._on_close = inner, on_close

    def put(self, output: EngineOutput) -> None:
        self._inner.put(output)

    def fail(self, error: BaseException) -> None:
        self._inner.fail(error)

    def close(self) -> None:
        self._on_close()
        self._inner.close()
