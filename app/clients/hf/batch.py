"""Continuous batching for the HF backend: the replies of every session decoded together, one token each per step.

Decoding a small model is memory-bound: a step reads every weight once whether it computes one row or eight, so a
batch of replies costs little more per step than one. Replies join the running batch at a token boundary (after a
prefill of their own, in chunks so that a long prompt does not stall the others for long) and leave it when they
end, stop or are cancelled; each streams its own tokens and picks them with its own settings (app/clients/hf/
sampling.py). Positions are each reply's own and padding is masked (app/clients/hf/batch_cache.py), so a reply is
the one it would be alone, up to floating-point ties.

transformers' own continuous batching (ContinuousBatchingManager) was not used: in 5.19 it takes one
generation config for all requests (only temperature, top-k and top-p vary per request, greedy and sampled replies
cannot share a batch, no seed per request) and applies logits processors to the whole batch, so neither a
grammar per reply (xgrammar keeps a matcher per reply) nor a penalty over the answer's own tokens fits it.

Every forward pass runs on one long-lived thread (torch's CPU kernels keep per-thread OpenMP state).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from app.clients.client_protocol import ClientError, ModelActivity
from app.clients.hf.batch_cache import BatchCache, has_plain_cache
from app.clients.hf.prompt_cache import PromptCache, layers_of
from app.clients.hf.sampling import TokenPicker
from app.clients.hf.streamer import IncrementalTextStreamer
from app.clients.streaming import EngineFeed, EngineOutput

log = logging.getLogger(__name__)


def _rows_times_weight(linear: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """`linear(hidden)` computed as weight @ hidden.T instead of hidden @ weight.T (see use_faster_cpu_head)."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    logits = torch.matmul(linear.weight, rows.T).T
    if linear.bias is not None:
        logits = logits + linear.bias
    return logits.reshape(*hidden.shape[:-1], logits.shape[-1])


def use_faster_cpu_head(model: Any) -> None:
    """On CPU, compute a plain linear output layer as weight @ hidden.T: the same products, but MKL runs the
    vocabulary-wide one about 2x faster this way for 1 to 8 rows (SmolLM2's 49152 x 576 head, 2-core AVX-512: 9.6 ->
    4.8 ms for one row, 17.6 -> 7.5 ms for eight), and the head is the largest matrix of a small model. Only the
    layer's forward changes: its parameters, their names and their tying stay as they are."""
    head = model.get_output_embeddings()
    # float32 only: in bfloat16 oneDNN's linear was as fast for one row and faster for four to eight (5.0 against
    # 6.6 ms for SmolLM2's head, 2-core AVX512-BF16).
    if model.device.type == "cpu" and type(head) is torch.nn.Linear and head.weight.dtype == torch.float32:
        head.forward = functools.partial(_rows_times_weight, head)  # type: ignore[method-assign]  # this one layer's


# Sampling settings a generation_config.json may hold that the batched sampler does not apply (generate() does):
# such a model answers one request at a time instead, so that its replies stay what its config asks for.
_UNBATCHED_GENERATION_SETTINGS = {"min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
                                  "no_repeat_ngram_size": 0, "bad_words_ids": None, "begin_suppress_tokens": None,
                                  "sequence_bias": None, "min_length": 0, "min_new_tokens": None}


def can_batch(model: Any) -> bool:
    """A text model whose cache is full attention in every layer (see batch_cache.is_plain_cache), whose rotary
    embedding does not depend on the batch's longest row (dynamic and longrope scaling do), and whose
    generation_config.json asks for nothing the batched sampler leaves out."""
    config = model.config.get_text_config()
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) in ("dynamic", "longrope"):
        return False
    generation = model.generation_config
    if any(getattr(generation, name, default) not in (default, None) for name, default in
           _UNBATCHED_GENERATION_SETTINGS.items()):
        return False
    return has_plain_cache(model)  # else decode alone, with generate()


class BatchedReply:
    """One reply in the decoder: its tokens, its own cache until it joins the batch, how it picks and streams."""

    def __init__(self, prompt_ids: Sequence[int], max_new_tokens: int, picker: TokenPicker, tokenizer: Any,
                 stop_token_ids: Sequence[int], *events: threading.Event) -> None:
        self.prompt_length = len(prompt_ids)
        self.ids = list(prompt_ids)  # the prompt, then the answer so far
        self.fed = 0  # tokens in the cache; the next one fed is ids[fed]
        self.max_new_tokens = max_new_tokens
        self.picker = picker
        self.stop_token_ids = frozenset(stop_token_ids)
        self.events = events  # Stop, or the consumer went away
        self.cache: DynamicCache | None = None  # its own, while it is prefilled
        self.feed: EngineFeed | None = None
        self._tokenizer = tokenizer
        self.streamer: IncrementalTextStreamer | None = None
        self.done = False
        self.failed = False  # its cache may be incomplete: not one to keep

    @property
    def cancelled(self) -> bool:
        return any(event.is_set() for event in self.events)

    @property
    def generated(self) -> int:
        return len(self.ids) - self.prompt_length

    def attach(self, feed: EngineFeed) -> None:
        self.feed = feed
        self.streamer = IncrementalTextStreamer(
            self._tokenizer, lambda text, tokens: feed.put(EngineOutput(text=text, tokens=tokens)), prompt_first=False
        )

    def take(self, token: int) -> None:
        """Stream `token`; end the reply at a stop token or its token limit."""
        assert self.streamer is not None
        self.ids.append(token)
        self.streamer.put(torch.tensor([token]))
        if token in self.stop_token_ids:
            self.end("stop")
        elif self.generated >= self.max_new_tokens:
            self.end("length")

    def end(self, reason: str | None) -> None:
        """No more tokens: the finish reason (None when cancelled) and the end of the feed."""
        if self.done:
            return
        self.done = True
        self.cache = None
        if self.feed is None:
            return
        try:
            if reason is not None and self.streamer is not None:
                self.streamer.end()
                self.feed.put(EngineOutput(finish_reason=reason))
        finally:
            self.feed.close()

    def fail(self, error: BaseException) -> None:
        if not self.done and self.feed is not None:
            self.feed.fail(error)
        self.failed = True
        self.end(None)


class BatchedDecoder:
    """Decodes up to `max_batch` replies together on its own thread; more wait in arrival order."""

    def __init__(self, model: Any, max_batch: int, prefill_chunk: int, prompt_cache: PromptCache | None = None) -> None:
        self.model = model
        self.prompt_cache = prompt_cache
        use_faster_cpu_head(model)
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk
        self._keeps_last_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._wake = threading.Condition()
        self._waiting: deque[BatchedReply] = deque()
        self._prefilling: list[BatchedReply] = []  # admitted, prompt not yet all in their cache
        self._decoding: list[BatchedReply] = []  # the batch: row i of the cache is reply i
        self._batch = BatchCache()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="hf-batch", daemon=True)
        self._thread.start()

    # ----- the consumers' side -----------------------------------------------------------------------------

    def submit(self, reply: BatchedReply, feed: EngineFeed) -> None:
        reply.attach(feed)
        with self._wake:
            if self._closed or not self._thread.is_alive():
                raise ClientError("The model was unloaded; load it again.")
            ahead = len(self._decoding) + len(self._prefilling) + len(self._waiting)
            if ahead >= self.max_batch:
                feed.put(EngineOutput(notice=f"Waiting: the model is already writing {self.max_batch} answers at "
                                             "once (DEMO_HF_MAX_BATCH); this one starts when one of them ends..."))
            self._waiting.append(reply)
            self._wake.notify()

    def wake(self) -> None:
        """Look at Stop now (a reply was cancelled): a waiting one is dropped at once."""
        with self._wake:
            self._wake.notify()

    def activity(self) -> ModelActivity:
        with self._wake:
            return ModelActivity(generating=len(self._decoding) + len(self._prefilling), waiting=len(self._waiting),
                                 at_once=self.max_batch)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    # ----- the decoding thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._closed or self._waiting or self._prefilling or self._decoding):
                    self._wake.wait()
                if self._closed:
                    break
                self._admit()
            try:
                self._drop_cancelled()
                with torch.inference_mode():
                    if self._prefilling:
                        self._prefill_step()
                    if self._decoding:
                        self._decode_step()
            except Exception as exc:  # outside one reply's own failure (memory, a device error): fail them all
                log.exception("The batched decoder failed; failing its replies and going on")
                self._fail_all(exc)
        self._fail_all(ClientError("The model was unloaded while it answered; send the message again."))

    def _fail_all(self, error: BaseException) -> None:
        with self._wake:
            replies = [*self._waiting, *self._prefilling, *self._decoding]
            self._waiting.clear()
            self._prefilling, self._decoding, self._batch = [], [], BatchCache()
        for reply in replies:
            reply.fail(error)

    def _admit(self) -> None:
        """Waiting replies that were cancelled go; the others start while the batch has room."""
        for reply in [r for r in self._waiting if r.cancelled]:
            self._waiting.remove(reply)
            reply.end(None)
        while self._waiting and len(self._decoding) + len(self._prefilling) < self.max_batch:
            self._prefilling.append(self._waiting.popleft())

    def _drop_cancelled(self) -> None:
        for reply in [r for r in self._prefilling if r.cancelled]:
            reply.end(None)
            self._stop_prefilling(reply)
        self._leave([r for r in self._decoding if r.cancelled])

    def _new_cache(self, reply: BatchedReply) -> DynamicCache:
        """The reply's own cache, holding already the longest prefix of its prompt the prompt cache has (at least one
        token is left to read: its logits pick the first token)."""
        cache = DynamicCache(config=self.model.config)
        if self.prompt_cache is not None:
            reply.fed = self.prompt_cache.prefill(cache, reply.ids, reply.prompt_length - 1)
            if reply.feed is not None:
                reply.feed.put(EngineOutput(cached_tokens=reply.fed))
        return cache

    def _remember(self, reply: BatchedReply, row: int) -> None:
        """Keep in the prompt cache what the batch's `row` holds for `reply`: its last `fed` positions (the rest is
        the left padding of the batch), copied out of the batch's tensors."""
        if self.prompt_cache is None or reply.failed or self._batch.cache is None:
            return
        layers = [(keys.clone(), values.clone()) for keys, values in layers_of(self._batch.cache, row, reply.fed)]
        self.prompt_cache.store(reply.ids[: reply.fed], layers)

    def _stop_prefilling(self, reply: BatchedReply) -> None:
        """Out of the prefill list; into the batch if it goes on. (Under the lock, as every change of the lists:
        activity() never sees a reply in neither.)"""
        with self._wake:
            self._prefilling.remove(reply)
            if not reply.done:
                assert reply.cache is not None
                self._batch.add(reply.cache)
                reply.cache = None
                self._decoding.append(reply)

    def _leave(self, replies: list[BatchedReply]) -> None:
        """Take `replies` out of the batch (and its cache) and end them."""
        if not replies:
            return
        for row, reply in enumerate(self._decoding):
            if reply in replies:
                self._remember(reply, row)
        with self._wake:
            keep = [i for i, reply in enumerate(self._decoding) if reply not in replies]
            self._batch.keep(keep)
            self._decoding = [self._decoding[i] for i in keep]
        for reply in replies:
            reply.end(None)

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 cache: DynamicCache) -> torch.Tensor:
        """The logits for the last position of every row: [rows, vocabulary]."""
        extra = {"logits_to_keep": 1} if self._keeps_last_logits else {}
        output = self.model(input_ids=input_ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                            use_cache=True, **extra)
        logits: torch.Tensor = output.logits[:, -1, :]
        return logits

    def _prefill_step(self) -> None:
        """Up to `prefill_chunk` prompt tokens, of the replies in arrival order; a reply whose prompt is all in its
        cache picks its first token and joins the batch."""
        budget = self.prefill_chunk
        device = self.model.device
        for reply in list(self._prefilling):
            if budget <= 0:
                break
            try:
                if reply.cache is None:
                    reply.cache = self._new_cache(reply)
                start = reply.fed
                end = min(reply.prompt_length, start + budget)
                budget -= end - start
                logits = self._forward(
                    torch.tensor([reply.ids[start:end]], device=device),
                    torch.arange(start, end, device=device).unsqueeze(0),
                    torch.ones((1, end), dtype=torch.long, device=device), reply.cache,
                )
                reply.fed = end
                if end < reply.prompt_length:
                    continue
                if self.prompt_cache is not None:
                    # The prompt alone, for the requests that share it while this reply is written (its tensors
                    # are replaced, never changed, as the batch grows: no copy needed).
                    self.prompt_cache.store(reply.ids[:end], layers_of(reply.cache))
                reply.take(reply.picker.pick(torch.tensor([reply.ids], device=device), logits))
            except Exception as exc:  # this prompt's failure (memory, a grammar), not the batch's
                log.exception("Prefill failed")
                reply.fail(exc)
            self._stop_prefilling(reply)

    def _decode_step(self) -> None:
        """One token for every reply in the batch, in one forward pass."""
        device = self.model.device
        replies = self._decoding
        try:
            logits = self._forward(
                torch.tensor([[reply.ids[-1]] for reply in replies], device=device),
                torch.tensor([[reply.fed] for reply in replies], device=device),
                self._batch.grow(), self._batch.cache,  # type: ignore[arg-type]
            )
        except Exception as exc:  # the whole batch's forward pass failed: every reply in it gets the error
            log.exception("Decode step failed")
            with self._wake:
                self._decoding, self._batch = [], BatchCache()
            for reply in replies:
                reply.fail(exc)
            return
        plain = any(reply.picker.plain_argmax for reply in replies)
        argmax = logits.argmax(dim=-1).tolist() if plain else []  # one batched argmax for the plain greedy rows
        for row, reply in enumerate(replies):
            reply.fed += 1
            try:
                if reply.picker.plain_argmax:
                    token = argmax[row]
                else:
                    token = reply.picker.pick(torch.tensor([reply.ids], device=device), logits[row : row + 1])
                reply.take(token)
            except Exception as exc:  # this reply's processors (a grammar) failed
                log.exception("Picking a token failed")
                reply.fail(exc)
        self._leave([reply for reply in replies if reply.done])
