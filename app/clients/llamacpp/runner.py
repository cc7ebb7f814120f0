"""The llama.cpp engine in a process of its own: `python -m app.clients.llamacpp.runner FD`.

The app starts one runner per loaded GGUF (app/clients/llamacpp/engine.py) and talks to it over the socket FD with
the JSON messages of app/clients/llamacpp/frames.py. Everything native lives here: llama.cpp itself, its context
and prompt cache, and the grammar masks (xgrammar, which the model's logits pass through). A crash of any of them
(a hostile GGUF, an instruction this CPU lacks, a driver's abort, the OOM killer) ends this process only; the app
sees the socket close and tells the sessions that were using it.

Requests run one at a time on the one context, in the order they came: a reader thread takes messages off the socket
(so Stop reaches a request at once), the main thread generates. Tokens go back in small batches: one message per
token would wake the app's threads 70 times a second, on the same cores as llama.cpp's compute threads.
"""

from __future__ import annotations

import codecs
import json
import os
import queue
import secrets
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from app.clients.llamacpp import frames as protocol
from app.clients.llamacpp.cache import ContextCache


class Runner:
    """The loaded model and the requests for it."""

    def __init__(self, conn: Connection, config: dict[str, Any]) -> None:
        import llama_cpp

        self.conn, self.lib, self.config = conn, llama_cpp, config
        # Flash attention where the model and device have it, as llama-server decides ("auto"): here it read a
        # 1,800-token prompt in 6.6 s instead of 7.6 and decoded at 85 tok/s instead of 72. The binding offers only
        # on or off (on fails where a backend lacks it), so its "on" is made to mean auto, in this process alone.
        llama_cpp.llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        self.llama = llama_cpp.Llama(
            model_path=config["model_path"], n_ctx=context_size(config["model_path"], config["n_ctx"]),
            n_threads=config["threads"], n_threads_batch=config["threads"], n_gpu_layers=config["gpu_layers"],
            flash_attn=True, verbose=False,
        )
        self.vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        self.cache = ContextCache(self.llama, llama_cpp, config["cache_bytes"])
        self.flush_s = config.get("flush_ms", protocol.FLUSH_MS) / 1000
        self._send_lock = threading.Lock()
        self._requests: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._aborted: set[int] = set()
        self._aborted_lock = threading.Lock()
        self._grammars: Any = None  # ConstrainedDecoding, built on the first grammar (it loads the tokenizer)
        self._grammar_lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self.conn.send_bytes(json.dumps(message).encode())

    def ready(self) -> dict[str, Any]:
        return {"op": "ready", "pid": os.getpid(), "n_ctx": self.llama.n_ctx(), "n_vocab": self.llama.n_vocab(),
                "eos": self.llama.token_eos(), "cache": self.cache.enabled}

    # ----- the socket's reader ------------------------------------------------------------------------------------

    def read(self) -> None:
        """Messages from the app, until it closes the socket (then this process ends: its parent is gone)."""
        try:
            while True:
                message = json.loads(self.conn.recv_bytes(protocol.MAX_MESSAGE_BYTES))
                op = message.get("op")
                if op in ("generate", "warm"):
                    self._requests.put(message)
                elif op == "abort":
                    with self._aborted_lock:
                        self._aborted.add(int(message["id"]))
                elif op == "stats":
                    self.send({"op": "stats", "id": message["id"], **self.cache.stats().__dict__})
                elif op == "shutdown":
                    break
        except (EOFError, OSError):
            pass
        self._requests.put(None)

    def aborted(self, request_id: int) -> bool:
        with self._aborted_lock:
            return request_id in self._aborted

    # ----- generation ---------------------------------------------------------------------------------------------

    def serve(self) -> None:
        threading.Thread(target=self.read, name="llamacpp-reader", daemon=True).start()
        while (request := self._requests.get()) is not None:
            if request["op"] == "warm":
                self.warm(request["tokens"])
                continue
            request_id = int(request["id"])
            try:
                if not self.aborted(request_id):
                    self.generate(request_id, request)
                else:
                    self.send({"op": "done", "id": request_id, "finish": "stop", "usage": [0, 0], "text": "", "n": 0})
            except Exception as exc:  # a grammar that does not compile, a bad request: that request fails alone
                self.send({"op": "error", "id": request_id, "error": str(exc).strip() or type(exc).__name__})
            finally:
                with self._aborted_lock:
                    self._aborted.discard(request_id)

    def generate(self, request_id: int, request: dict[str, Any]) -> None:
        llama, lib = self.llama, self.lib
        token_ids: list[int] = request["tokens"]
        params = request["params"]
        stop_ids = set(request["stop_ids"])
        seed = params.get("seed")
        # The context keeps the last seed it was given: an unseeded reply draws a fresh one, or it would repeat the
        # previous seeded reply's draws.
        llama.set_seed(seed % 2**32 if seed is not None else secrets.randbits(32))
        mask = _GrammarMask(self.grammars(request["stop_ids"]), request["grammar"]) if request.get("grammar") else None
        cached = self.cache.prepare(token_ids)
        self.send({"op": "started", "id": request_id, "cached": cached})
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending: list[str] = []
        unsent = generated = 0
        last_sent = 0.0
        finish = "length"
        tokens = llama.generate(
            token_ids, temp=params["temperature"], top_p=params["top_p"], top_k=params["top_k"], min_p=0.0,
            repeat_penalty=params["repeat_penalty"], reset=True,
            logits_processor=lib.LogitsProcessorList([mask]) if mask else None,
        )
        try:
            for token in tokens:
                if self.aborted(request_id):
                    finish = "stop"
                    break
                if (token in stop_ids or lib.llama_vocab_is_eog(self.vocab, token)) and not params["ignore_eos"]:
                    finish = "stop"
                    break
                generated += 1
                unsent += 1
                pending.append(decoder.decode(llama.detokenize([token])))
                if generated >= request["max_new_tokens"]:
                    break
                now = time.perf_counter()
                if now - last_sent >= self.flush_s:  # the first token at once, then batches
                    self.send({"op": "text", "id": request_id, "text": "".join(pending), "n": unsent})
                    pending.clear()
                    unsent, last_sent = 0, now
            if mask is not None and mask.error is not None:
                raise mask.error
        finally:
            tokens.close()
        pending.append(decoder.decode(b"", final=True))
        self.send({"op": "done", "id": request_id, "finish": finish, "text": "".join(pending), "n": unsent,
                   "usage": [len(token_ids), generated]})

    def warm(self, tokens: list[int]) -> None:
        """Read `tokens` into the context a chunk at a time, stopping as soon as a reply waits (what was read stays:
        the prompt cache matches prefixes). The next reply that starts with them reads only what follows."""
        try:
            self.cache.prepare([*tokens, 0])
            while self.llama.n_tokens < len(tokens) and self._requests.empty():
                start = self.llama.n_tokens
                self.llama.eval(tokens[start:start + protocol.WARM_CHUNK])
        except Exception:  # a warm-up is a favour: a failure costs the reply that follows only the reading
            self.llama.reset()
        self.send({"op": "warmed", "tokens": int(self.llama.n_tokens)})

    def grammars(self, stop_ids: list[int]) -> Any:
        """Grammars for this model's vocabulary, as the transformers backend compiles them; the tokenizer (read
        from the GGUF by transformers) is loaded on the first grammar."""
        with self._grammar_lock:
            if self._grammars is None:
                from transformers import AutoTokenizer

                from app.clients.hf.grammar import ConstrainedDecoding

                path = self.config["model_path"]
                tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
                self._grammars = ConstrainedDecoding(tokenizer, self.llama.n_vocab(), stop_ids)
            return self._grammars


def context_size(path: str, requested: int) -> int:
    """The context to load: `requested` when set, else the model's own window, shortened only where its keys and
    values (f16, as llama.cpp keeps them) would take more than a quarter of the memory available now; 0 (llama.cpp's
    own choice, the model's window) when the file's metadata cannot be read here."""
    if requested > 0:
        return requested
    from app.clients.llamacpp.gguf_header import GGUFHeaderError, read_header

    try:
        fields = read_header(path).fields
        arch = fields["general.architecture"]
        window = int(fields[f"{arch}.context_length"])
        heads = int(fields[f"{arch}.attention.head_count"])
        kv_heads = int(fields.get(f"{arch}.attention.head_count_kv", heads))
        head_dim = int(fields[f"{arch}.embedding_length"]) // heads
        per_token = 2 * 2 * int(fields[f"{arch}.block_count"]) * kv_heads * head_dim
    except (GGUFHeaderError, OSError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0  # an architecture without these keys, or a damaged file: llama.cpp says the rest
    import psutil

    affordable = psutil.virtual_memory().available // 4 // max(1, per_token)
    return max(512, min(window, affordable // 256 * 256 or 512))


class _GrammarMask:
    """xgrammar's token mask as a llama-cpp-python logits processor. Its logits arrive as a strided view in token-id
    order; an exception raised here would be swallowed by ctypes (and sampling would go on unmasked), so it is kept
    and raised by the request afterwards."""

    def __init__(self, grammars: Any, ebnf: str) -> None:
        self.processor = grammars.logits_processors(ebnf)[0]
        self.error: BaseException | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        import torch

        try:
            row = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32)).unsqueeze(0)
            ids = torch.from_numpy(np.asarray(input_ids, dtype=np.int64)).unsqueeze(0)
            allowed: np.ndarray = self.processor(ids, row)[0].numpy()
            return allowed
        except BaseException as exc:
            self.error = exc
            return np.full_like(scores, -np.inf)


def main() -> int:
    conn = Connection(int(sys.argv[1]))
    try:
        config = json.loads(conn.recv_bytes(protocol.MAX_MESSAGE_BYTES))
        try:
            runner = Runner(conn, config)
            ready = runner.ready()
        except Exception as exc:  # llama.cpp refused the file: say why
            conn.send_bytes(json.dumps({"op": "failed", "error": str(exc).strip() or type(exc).__name__}).encode())
            return 1
        runner.send(ready)
        runner.serve()
    except (EOFError, OSError):  # the app went away
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
