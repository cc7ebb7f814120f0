"""Hugging Face transformers backend: one model per process, shared by every session.

Text models whose cache can be batched decode the answers of all sessions together (continuous batching,
app/clients/hf/batch.py): a second session does not wait for the first one's whole answer. Other models (vision-
language models, sliding-window or linear-attention caches) and DEMO_HF_MAX_BATCH=1 answer one after another with
generate(), on one long-lived thread; a waiting session is told so and can still cancel while it waits. torch's
CPU kernels keep per-thread OpenMP state: a fresh thread per answer, or answers alternating between threads,
measurably slowed decoding (bench/stream_overhead.py). Everything else about streaming is shared by all backends
(app/clients/streaming.py).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar, cast

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    DynamicCache,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from app.clients.chat_template import ChatTemplate, PreparedPrompt
from app.clients.client_protocol import ClientError, ModelActivity
from app.clients.hf.batch import BatchedDecoder, BatchedReply, can_batch
from app.clients.hf.batch_cache import has_plain_cache
from app.clients.hf.grammar import ConstrainedDecoding
from app.clients.hf.prompt_cache import PromptCache, layers_of
from app.clients.hf.sampling import TokenPicker, answer_processors, suppressed_tokens, torch_seed
from app.clients.hf.streamer import IncrementalTextStreamer
from app.clients.model_path import resolve_model_path
from app.clients.streaming import EngineFeed, EngineOutput, EngineRequest
from app.clients.template_client import LocalTemplateClient
from app.clients.transformers_loading import transformers_loading
from app.clients.vision import is_vision_config, load_processor
from app.config import ModelSettings, offline_by_default

log = logging.getLogger(__name__)
T = TypeVar("T")



class GenerationQueue:
    """generate() calls one at a time, in order, on one long-lived thread; knows whether any is running or waiting."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")
        self._lock = threading.Lock()
        self._unfinished = 0

    def busy(self) -> bool:
        with self._lock:
            return self._unfinished > 0

    def activity(self) -> ModelActivity:
        with self._lock:
            return ModelActivity(generating=min(self._unfinished, 1), waiting=max(self._unfinished - 1, 0), at_once=1)

    def submit(self, job: Callable[..., T], *args: Any) -> Future[T]:
        with self._lock:
            self._unfinished += 1
        future = self._executor.submit(job, *args)
        future.add_done_callback(self._finished)  # also runs for a job cancelled before it started
        return future

    def _finished(self, _: Future[Any]) -> None:
        with self._lock:
            self._unfinished -= 1

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class CancelCriteria(StoppingCriteria):
    """Ends generate() at the next token once any of the events is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        stop = any(event.is_set() for event in self.events)
        flags = torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, flags)


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(requested: str, device: str) -> torch.dtype:
    if requested == "auto":
        # bfloat16 halves memory on GPUs. On a CPU float32 stays the default even where the CPU computes in bfloat16
        # natively (1.6x faster decoding there, DEMO_DTYPE=bfloat16): SmolLM2's seeded answers to the smoke set,
        # which a 135M model gets right by a small margin, missed more often in bfloat16 (docs/benchmarks.md).
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        dtype = getattr(torch, requested)
    except AttributeError:
        dtype = None
    if not isinstance(dtype, torch.dtype):
        raise ClientError(f"Unknown dtype {requested!r}; use auto, float32, float16 or bfloat16.")
    return dtype


class HFClient(LocalTemplateClient):
    backend = "hf"

    def __init__(self, settings: ModelSettings) -> None:
        offline_by_default()
        self.settings = settings
        self.device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype, self.device)
        self.model_path = resolve_model_path(settings.model_path)
        processor = None
        # Any: transformers types its models loosely (its wrapped `to` and `generate` fail mypy on a real model).
        self.model: Any
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            load_kwargs: dict[str, Any] = {"dtype": dtype}
            if self.device == "cuda":
                load_kwargs["device_map"] = "auto"  # spreads a large model over every visible GPU
            model_class: Any = AutoModelForCausalLM
            if is_vision_config(AutoConfig.from_pretrained(self.model_path)):
                # A vision-language model: its processor's tokenizer is the one its chat template is written for.
                processor = load_processor(self.model_path)
                tokenizer = processor.tokenizer
                model_class = AutoModelForImageTextToText
            with transformers_loading():
                self.model = model_class.from_pretrained(self.model_path, **load_kwargs)
        except ClientError:
            raise
        except Exception as exc:  # loaders raise many types (OSError, SafetensorError, ValueError...)
            raise ClientError(f"Could not load the model from {str(self.model_path)!r}: {exc}") from exc
        if self.device != "cuda":
            self.model.to(self.device)
        self.model.eval()
        eos = self.model.generation_config.eos_token_id
        self.template = ChatTemplate(tokenizer, eos if isinstance(eos, list) else [eos],
                                     self._context_window(tokenizer), processor)
        self._constrained = ConstrainedDecoding(self.tokenizer, self.model.get_output_embeddings().weight.shape[0],
                                                self.stop_token_ids)
        self.decoder: BatchedDecoder | None = None
        self.queue: GenerationQueue | None = None
        self.prompt_cache: PromptCache | None = None
        if settings.prompt_cache_mb > 0 and processor is None and has_plain_cache(self.model):
            self.prompt_cache = PromptCache(settings.prompt_cache_mb * 2**20)
        if settings.hf_max_batch > 1 and processor is None and can_batch(self.model):
            self.decoder = BatchedDecoder(self.model, settings.hf_max_batch, settings.hf_prefill_chunk,
                                          self.prompt_cache)
            # Its thread stops when this client is closed, collected or the interpreter exits (a thread killed
            # inside a torch kernel at exit aborts the process: "terminate called without an active exception").
            weakref.finalize(self, self.decoder.close)
        else:
            self.queue = GenerationQueue()
        log.info("Loaded %s on %s (%s), context %d", self.model_path, self.device, dtype, self.context_window)

    # ----- derived model facts -------------------------------------------------------------------------

    def _context_window(self, tokenizer: Any) -> int:
        if self.settings.max_context_tokens > 0:
            return self.settings.max_context_tokens
        config = self.model.config
        for attribute in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"):
            value = getattr(config, attribute, None) or getattr(config.get_text_config(), attribute, None)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(tokenizer, "model_max_length", 0)
        return limit if 0 < limit < 10_000_000 else 2048

    def describe(self) -> str:
        name = self.model_path.name
        template = ", generic chat template" if self.template.uses_fallback_template else ""
        batching = f" · batches of {self.decoder.max_batch}" if self.decoder is not None else ""
        if self.prompt_cache is not None:
            batching += f" · prompt cache {self.prompt_cache.max_bytes // 2**20} MB"
        return (f"transformers · {name} · {self.device} · {self.model.dtype}{template} · context {self.context_window}"
                f"{batching}")

    def activity(self) -> ModelActivity:
        return self.decoder.activity() if self.decoder is not None else self._generate_queue().activity()

    def _generate_queue(self) -> GenerationQueue:
        assert self.queue is not None, "this model decodes in batches"
        return self.queue

    # ----- generation ------------------------------------------------------------------------------------

    def engine_request(self, prompt: PreparedPrompt, cancel: threading.Event) -> EngineRequest:
        if self.model is None:
            raise ClientError("The model was unloaded; load it again.")
        if self.decoder is not None:
            return _BatchedGeneration(self, self.decoder, prompt, cancel)
        return _Generation(self, prompt, cancel)

    def engine_error(self, error: BaseException) -> ClientError:
        return ClientError.engine_failed("Generation", error)

    def grammar_processors(self, grammar: str | None) -> LogitsProcessorList:
        if grammar is None:
            return LogitsProcessorList()
        try:
            return self._constrained.logits_processors(grammar)
        except Exception as exc:  # a schema the grammar engine cannot compile
            raise ClientError(f"Could not build the grammar for this reply: {exc}") from exc

    def token_picker(self, prompt: PreparedPrompt) -> TokenPicker:
        """How the batched decoder picks this reply's tokens: what generate_kwargs asks generate() for."""
        return TokenPicker(
            prompt.params, len(prompt.token_ids), prompt.max_new_tokens, self.grammar_processors(prompt.grammar),
            suppressed_tokens(self.model.generation_config, self.stop_token_ids, prompt.grammar is not None),
            self.stop_token_ids, self.model.device,
        )

    def generate_kwargs(self, prompt: PreparedPrompt) -> dict[str, Any]:
        """generate()'s settings for `prompt`, short of the streamer and the stopping criteria."""
        params, max_new_tokens = prompt.params, prompt.max_new_tokens
        processors = answer_processors(params, len(prompt.token_ids), self.grammar_processors(prompt.grammar))
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "eos_token_id": self.stop_token_ids or None,
            "pad_token_id": self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else (self.stop_token_ids[0] if self.stop_token_ids else None),
            "repetition_penalty": 1.0,  # no second, prompt-wide penalty from the model's generation_config.json
            "logits_processor": processors,
        }
        if params.greedy:
            # Explicit Nones so sampling defaults from generation_config.json do not warn or apply.
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        if params.ignore_eos:
            kwargs["min_new_tokens"] = max_new_tokens
        if prompt.grammar is not None:
            kwargs["suppress_tokens"] = suppressed_tokens(self.model.generation_config, self.stop_token_ids,
                                                          constrained=True) or None
        input_ids = torch.tensor([prompt.token_ids], device=self.model.device)
        kwargs.update(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        for name, tensor in prompt.encoded.image_inputs.items():  # pixel_values and the like, for the vision tower
            floating = isinstance(tensor, torch.Tensor) and tensor.is_floating_point()
            kwargs[name] = tensor.to(self.model.device, self.model.dtype) if floating else (
                tensor.to(self.model.device) if isinstance(tensor, torch.Tensor) else tensor)
        return kwargs

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()
        if self.queue is not None:
            self.queue.shutdown()
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class _Generation:
    """One generate() call on the client's generation thread, queued behind the answers of other sessions."""

    def __init__(self, client: HFClient, prompt: PreparedPrompt, cancel: threading.Event) -> None:
        self.client, self.prompt, self.cancel = client, prompt, cancel
        self.kwargs = client.generate_kwargs(prompt)  # here, so that a grammar error reaches the caller at once
        self.aborted = threading.Event()
        self.job: Future[None] | None = None

    def start(self, feed: EngineFeed) -> None:
        queue = self.client._generate_queue()
        if queue.busy():
            feed.put(EngineOutput(notice="Waiting for another session's answer to finish..."))
        self.job = queue.submit(self._run, feed)

    def abort(self) -> None:
        self.aborted.set()  # a running generate() ends at its next token
        if self.job is not None:
            self.job.cancel()  # one still queued never starts

    def _run(self, feed: EngineFeed) -> None:
        try:
            if self.aborted.is_set() or self.cancel.is_set():
                return
            streamer = IncrementalTextStreamer(
                self.client.tokenizer, lambda text, tokens: feed.put(EngineOutput(text=text, tokens=tokens))
            )
            if self.prompt.params.seed is not None:
                torch.manual_seed(torch_seed(self.prompt.params.seed))
            cache = self._cache_with_prefix(feed)
            with torch.inference_mode():
                sequences = self.client.model.generate(
                    **self.kwargs, streamer=streamer, past_key_values=cache,
                    stopping_criteria=StoppingCriteriaList([CancelCriteria(self.cancel, self.aborted)]),
                )
            if cache is not None:
                self._remember(cache, getattr(sequences, "sequences", sequences))  # a config may ask for a dict
            feed.put(EngineOutput(finish_reason=self._finish_reason(streamer)))
        except BaseException as exc:  # reported to the consumer, never lost in the thread
            feed.fail(exc)
        finally:
            feed.close()

    def _cache_with_prefix(self, feed: EngineFeed) -> DynamicCache | None:
        """A cache for generate() holding already the longest prefix of the prompt the prompt cache has (None: no
        prompt cache for this model, or a prompt with images, whose positions depend on more than its tokens)."""
        prompt_cache = self.client.prompt_cache
        if prompt_cache is None or self.prompt.encoded.image_inputs:
            return None
        cache = DynamicCache(config=self.client.model.config)
        cached = prompt_cache.prefill(cache, self.prompt.token_ids, len(self.prompt.token_ids) - 1)
        feed.put(EngineOutput(cached_tokens=cached))
        return cache

    def _remember(self, cache: DynamicCache, sequences: torch.Tensor) -> None:
        """Keep what generate() left in the cache: the prompt and the answer but its last token."""
        assert self.client.prompt_cache is not None, "a cache with a prefix comes from the prompt cache"
        held = cache.get_seq_length()
        self.client.prompt_cache.store(sequences[0, :held].tolist(), layers_of(cache))

    def _finish_reason(self, streamer: IncrementalTextStreamer) -> str | None:
        """generate() does not say why it stopped: a stop token, the token limit, or (None) Stop."""
        if streamer.last_token_id in self.client.stop_token_ids:
            return "stop"
        if streamer.completion_tokens >= self.prompt.max_new_tokens:
            return "length"
        return None


class _BatchedGeneration:
    """One reply in the client's batched decoder, next to the answers of other sessions."""

    def __init__(self, client: HFClient, decoder: BatchedDecoder, prompt: PreparedPrompt,
                 cancel: threading.Event) -> None:
        self.decoder = decoder
        self.aborted = threading.Event()
        # Built here, so that a grammar error reaches the caller at once.
        self.reply = BatchedReply(prompt.token_ids, prompt.max_new_tokens, client.token_picker(prompt),
                                  client.tokenizer, client.stop_token_ids, cancel, self.aborted)

    def start(self, feed: EngineFeed) -> None:
        self.decoder.submit(self.reply, feed)

    def abort(self) -> None:
        self.aborted.set()  # it leaves the batch at the next step; one still waiting never starts
        self.decoder.wake()
