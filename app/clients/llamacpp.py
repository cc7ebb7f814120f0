"""The llama.cpp engine (GGUF files) through llama-cpp-python, the maintained binding.

The prompt is built as for the other local engines (app/clients/local.py): the GGUF's own chat template, rendered
with the tokenizer transformers reads from the same file, so the dialects, the context fitting and the grammars are
the ones every local backend uses. llama.cpp then only evaluates token ids and samples.

One llama.cpp context holds one sequence and is not thread-safe, so requests take turns on it (a lock). A request
reuses the keys and values of the longest prefix it shares with the live sequence or with the kept sequences of
other conversations (app/clients/llamacpp_cache.py): a conversation's next turn reads only its new messages, also
when another conversation was answered in between.
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import secrets
import threading
from pathlib import Path

import numpy as np
import psutil

from app.clients.base import ClientError, ModelActivity
from app.clients.hf.grammar import ConstrainedDecoding
from app.clients.llamacpp_cache import ContextCache
from app.clients.local import ChatTemplate, LocalTemplateClient, PreparedPrompt
from app.clients.streaming import EngineFeed, EngineOutput, EngineRequest
from app.config import ModelSettings
from app.embedded_model import gguf_path, is_embedded

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
        try:
            import llama_cpp
        except ImportError as exc:
            raise ClientError(INSTALL_HINT) from exc
        from transformers import AutoTokenizer

        self.settings = settings
        self.model_path = resolve_gguf(settings.model_path)
        self._llama_cpp = llama_cpp
        self.threads = settings.llamacpp_threads or default_threads()
        try:
            self.llama = llama_cpp.Llama(
                model_path=str(self.model_path), n_ctx=settings.max_context_tokens or 8192,
                n_threads=self.threads, n_threads_batch=self.threads,
                n_gpu_layers=settings.llamacpp_gpu_layers, verbose=False,
            )
            tokenizer = AutoTokenizer.from_pretrained(str(self.model_path.parent), gguf_file=self.model_path.name)
        except (ValueError, OSError, RuntimeError) as exc:
            raise ClientError(f"llama.cpp could not load {self.model_path.name}: {exc}") from exc
        self._vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        self.template = ChatTemplate(tokenizer, [self.llama.token_eos()], self.llama.n_ctx())
        self.context_cache = ContextCache(self.llama, llama_cpp, settings.prompt_cache_mb * 2**20)
        self._lock = threading.Lock()  # one context, one sequence: requests take turns
        self._waiting = 0
        self._generating = 0
        self._count_lock = threading.Lock()

    def describe(self) -> str:
        cache = f" · prompt cache {self.settings.prompt_cache_mb} MB" if self.context_cache.kept.max_bytes else ""
        return (f"llama.cpp · {self.model_path.name} · context {self.context_window} · "
                f"{self.threads} threads · {self.settings.llamacpp_gpu_layers} GPU layers{cache}")

    def engine_request(self, prompt: PreparedPrompt, cancel: threading.Event) -> EngineRequest:
        return _Request(self, prompt, cancel)

    def engine_error(self, error: BaseException) -> ClientError:
        return ClientError.engine_failed("llama.cpp", error)

    def activity(self) -> ModelActivity:
        with self._count_lock:
            return ModelActivity(generating=self._generating, waiting=self._waiting, at_once=1)

    def is_end(self, token: int) -> bool:
        return token in self.stop_token_ids or bool(self._llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @functools.cached_property
    def constrained(self) -> ConstrainedDecoding:
        """Grammars for this model's vocabulary, as the transformers backend compiles them (on first use)."""
        return ConstrainedDecoding(self.tokenizer, self.llama.n_vocab(), self.stop_token_ids)

    def close(self) -> None:
        with self._lock:
            self.llama.close()


class _Request:
    """One reply: generated on a thread of its own once the context is free, token by token into the feed."""

    def __init__(self, client: LlamaCppClient, prompt: PreparedPrompt, cancel: threading.Event) -> None:
        self.client, self.prompt, self.cancel = client, prompt, cancel
        self._aborted = threading.Event()

    def start(self, feed: EngineFeed) -> None:
        threading.Thread(target=self._run, args=(feed,), name="llamacpp-request", daemon=True).start()

    def abort(self) -> None:
        self._aborted.set()

    def _stopped(self) -> bool:
        return self._aborted.is_set() or self.cancel.is_set()

    def _run(self, feed: EngineFeed) -> None:
        client = self.client
        with client._count_lock:
            client._waiting += 1
        try:
            with client._lock:
                with client._count_lock:
                    client._waiting -= 1
                    client._generating += 1
                try:
                    if not self._stopped():
                        self._generate(feed)
                finally:
                    with client._count_lock:
                        client._generating -= 1
        except Exception as exc:  # the engine's failure: the consumer turns it into a clear error
            log.exception("llama.cpp generation failed")
            feed.fail(exc)
        finally:
            feed.close()

    def _generate(self, feed: EngineFeed) -> None:
        client, prompt, params = self.client, self.prompt, self.prompt.params
        llama = client.llama
        # The context keeps the last seed it was given: an unseeded reply draws a fresh one, or it would repeat the
        # previous seeded reply's draws.
        llama.set_seed(params.seed % 2**32 if params.seed is not None else secrets.randbits(32))
        mask = _GrammarMask(client, prompt.grammar) if prompt.grammar else None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        generated = 0
        finish = "length"
        feed.put(EngineOutput(cached_tokens=client.context_cache.prepare(prompt.token_ids)))
        tokens = llama.generate(
            prompt.token_ids, temp=0.0 if params.greedy else params.temperature, top_p=params.top_p,
            top_k=params.top_k, min_p=0.0, repeat_penalty=params.repetition_penalty, reset=True,
            logits_processor=client._llama_cpp.LogitsProcessorList([mask]) if mask else None,
        )
        try:
            for token in tokens:
                if self._stopped():
                    finish = "stop"
                    break
                if client.is_end(token) and not params.ignore_eos:
                    finish = "stop"
                    break
                generated += 1
                text = decoder.decode(llama.detokenize([token]))
                feed.put(EngineOutput(text=text, tokens=1))
                if generated >= prompt.max_new_tokens:
                    break
            if mask is not None and mask.error is not None:
                raise mask.error
        finally:
            tokens.close()
        feed.put(EngineOutput(text=decoder.decode(b"", final=True), finish_reason=finish,
                              usage=(len(prompt.token_ids), generated)))


class _GrammarMask:
    """xgrammar's token mask as a llama-cpp-python logits processor. Its logits arrive as a strided view in token-id
    order; an exception raised here would be swallowed by ctypes (and sampling would go on unmasked), so it is kept
    and raised by the request afterwards."""

    def __init__(self, client: LlamaCppClient, ebnf: str) -> None:
        self.processor = client.constrained.logits_processors(ebnf)[0]
        self.error: BaseException | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        import torch

        try:
            row = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32)).unsqueeze(0)
            ids = torch.from_numpy(np.asarray(input_ids, dtype=np.int64)).unsqueeze(0)
            return self.processor(ids, row)[0].numpy()
        except BaseException as exc:
            self.error = exc
            return np.full_like(scores, -np.inf)
