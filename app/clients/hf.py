"""Hugging Face transformers backend: one model per process, answers streamed from one generation thread.

Concurrent sessions are serialised with a lock (a CPU has nothing to gain from interleaving two generate
calls); a waiting session is told so and can still cancel while it waits. Every generate() runs on the same
long-lived thread: torch's CPU kernels keep per-thread OpenMP state, and a fresh thread per answer, or
answers alternating between threads, measurably slowed decoding (bench/stream_overhead.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)

from app.clients.base import ClientError, Delta, GenerationParams, ToolRequest
from app.clients.chat_template import ChatTemplate, LocalTemplateClient
from app.clients.constrained import ConstrainedDecoding
from app.clients.incremental_streamer import IncrementalTextStreamer
from app.clients.stop_strings import StopStringFilter
from app.config import ModelSettings, offline_by_default
from app.conversation import AnswerMetrics, ToolCall

log = logging.getLogger(__name__)

_WAIT_NOTICE_AFTER_S = 0.5


class CancelCriteria(StoppingCriteria):
    """Ends generate() at the next token once any of the events is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        stop = any(event.is_set() for event in self.events)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


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
        # bfloat16 halves memory on GPUs; on CPUs float32 is usually the faster kernel path.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        dtype = getattr(torch, requested)
    except AttributeError:
        dtype = None
    if not isinstance(dtype, torch.dtype):
        raise ClientError(f"Unknown dtype {requested!r}; use auto, float32, float16 or bfloat16.")
    return dtype


def resolve_model_path(model_path: str) -> Path:
    """An empty path means the embedded SmolLM2 (converted on first use); anything else must be a local folder."""
    if not model_path.strip():
        from app.embedded_model import ensure_embedded_model

        return ensure_embedded_model()
    path = Path(model_path.strip()).expanduser()
    if not path.exists():
        raise ClientError(
            f"Model folder {str(path)!r} does not exist. Enter the path of a local Hugging Face model folder "
            "(one with config.json), or clear the field to use the embedded SmolLM2."
        )
    if not (path / "config.json").is_file():
        raise ClientError(
            f"{str(path)!r} has no config.json, so it is not a Hugging Face model folder. "
            "Point to the folder that holds config.json and the *.safetensors weights."
        )
    return path


class HFClient(LocalTemplateClient):
    backend = "hf"

    def __init__(self, settings: ModelSettings) -> None:
        offline_by_default()
        self.settings = settings
        self.device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype, self.device)
        self.model_path = resolve_model_path(settings.model_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            load_kwargs: dict[str, Any] = {"dtype": dtype}
            if self.device == "cuda":
                load_kwargs["device_map"] = "auto"  # spreads a large model over every visible GPU
            self.model = AutoModelForCausalLM.from_pretrained(self.model_path, **load_kwargs)
        except Exception as exc:  # loaders raise many types (OSError, SafetensorError, ValueError...)
            raise ClientError(f"Could not load the model from {str(self.model_path)!r}: {exc}") from exc
        if self.device != "cuda":
            self.model.to(self.device)
        self.model.eval()
        eos = self.model.generation_config.eos_token_id
        self.template = ChatTemplate(tokenizer, eos if isinstance(eos, list) else [eos], self._context_window(tokenizer))
        self._constrained = ConstrainedDecoding(self.tokenizer, self.model, self.stop_token_ids)
        self._lock = threading.Lock()
        self._generation_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")
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
        return f"transformers · {name} · {self.device} · {self.model.dtype}{template} · context {self.context_window}"

    # ----- generation ------------------------------------------------------------------------------------

    def stream(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
    ) -> Iterator[Delta]:
        metrics = AnswerMetrics()
        started = time.perf_counter()
        next_beat = started + _WAIT_NOTICE_AFTER_S
        while not self._lock.acquire(timeout=0.05):
            if cancel.is_set():
                metrics.finish_reason = "cancelled"
                yield Delta(finish_reason="cancelled", metrics=metrics)
                return
            if time.perf_counter() >= next_beat:
                # Say once why nothing happens, then beat every 0.25 s so the UI can notice Stop meanwhile.
                first = next_beat == started + _WAIT_NOTICE_AFTER_S
                next_beat += 0.25
                notice = "Waiting for another session's answer to finish..." if first else None
                yield Delta(notice=notice, metrics=metrics)
        try:
            yield from self._generate_locked(messages, params, cancel, metrics, started, tools)
        finally:
            self._lock.release()

    def _generate_locked(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        metrics: AnswerMetrics,
        started: float,
        tools: ToolRequest | None,
    ) -> Iterator[Delta]:
        prompt = self.template.prepare(messages, params, tools)
        max_new_tokens = prompt.max_new_tokens
        metrics.prompt_tokens = len(prompt.token_ids)
        metrics.dropped_messages = prompt.dropped_messages
        if prompt.notice:
            yield Delta(notice=prompt.notice, metrics=metrics)

        finished = threading.Event()  # set when the consumer goes away: stops generate() too
        stop_filter = StopStringFilter(prompt.stop_strings)
        parser, forced = prompt.parser, prompt.forced
        streamer = IncrementalTextStreamer(self.tokenizer, on_token=lambda n: setattr(metrics, "completion_tokens", n))
        input_ids = torch.tensor([prompt.token_ids], device=self.model.device)
        generate_kwargs = self._generate_kwargs(prompt.params, max_new_tokens, len(prompt.token_ids))
        if forced:
            try:
                generate_kwargs["logits_processor"].extend(self._constrained.logits_processors(forced))
            except Exception as exc:  # a schema the grammar engine cannot compile
                raise ClientError(f"Could not build the tool-call grammar: {exc}") from exc
            # Once the call is complete the grammar allows only stop tokens: they must not be suppressed too,
            # or every token would be masked.
            suppressed = self.model.generation_config.suppress_tokens or []
            generate_kwargs["suppress_tokens"] = [t for t in suppressed if t not in self.stop_token_ids] or None
        generate_kwargs.update(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([CancelCriteria(cancel, finished)]),
        )
        failure: list[BaseException] = []

        def run() -> None:
            try:
                with torch.inference_mode():
                    self.model.generate(**generate_kwargs)
            except BaseException as exc:  # reported to the consumer, never lost in the thread
                failure.append(exc)
                streamer.end()

        if params.seed is not None:
            torch.manual_seed(params.seed)
        job = self._generation_thread.submit(run)
        read_to_end = False
        calls: list[ToolCall] = []
        try:
            for chunk in streamer:
                if metrics.time_to_first_token_s is None:
                    metrics.time_to_first_token_s = time.perf_counter() - started
                visible = stop_filter.feed(chunk)
                if parser is not None and visible:
                    visible = parser.feed(visible)
                if visible:
                    yield Delta(text=visible, metrics=metrics)
                if stop_filter.stopped:
                    # Our own text-level match (transformers' stop_strings criterion also fires on a token
                    # that merely ends with the start of a stop string); generate() ends at the next token.
                    finished.set()
            tail = stop_filter.flush()
            if parser is not None:
                tail = parser.feed(tail) + parser.finish()[0]
                calls = parser.calls
            if tail:
                yield Delta(text=tail, metrics=metrics)
            read_to_end = True
        finally:
            finished.set()
            job.result()  # run() swallows its own exceptions, so this only waits for generate() to return
            cancelled = cancel.is_set() or not read_to_end
            self._finish_metrics(metrics, streamer, stop_filter, cancelled, max_new_tokens, started)
        if failure:
            raise ClientError(f"Generation failed: {failure[0]}") from failure[0]
        prompt.check_forced_call(calls, metrics.finish_reason)
        if calls:
            metrics.finish_reason = "tool_calls"
        yield Delta(finish_reason=metrics.finish_reason, metrics=metrics, tool_calls=list(calls))

    def _generate_kwargs(self, params: GenerationParams, max_new_tokens: int, prompt_length: int) -> dict[str, Any]:
        processors = LogitsProcessorList()
        if params.repetition_penalty != 1.0:
            # On the answer's own tokens only. transformers' default counts the prompt's too, which keeps a model
            # from quoting a tool result: SmolLM2 at 1.1 answered "17 × 23 ≡ 45" after the calculator said 391.
            processors.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty,
                                                               prompt_ignore_length=prompt_length))
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
        return kwargs

    def _finish_metrics(
        self,
        metrics: AnswerMetrics,
        streamer: IncrementalTextStreamer,
        stop_filter: StopStringFilter,
        cancelled: bool,
        max_new_tokens: int,
        started: float,
    ) -> None:
        metrics.completion_tokens = streamer.completion_tokens
        metrics.record_timing(started, streamer.first_token_time, streamer.last_token_time)
        if stop_filter.stopped or streamer.last_token_id in self.stop_token_ids:
            metrics.finish_reason = "stop"
        elif metrics.completion_tokens >= max_new_tokens:
            metrics.finish_reason = "length"
        elif cancelled:
            metrics.finish_reason = "cancelled"
        else:
            metrics.finish_reason = "stop"

    def close(self) -> None:
        with self._lock:
            self._generation_thread.shutdown(wait=True)
            self.model = None  # type: ignore[assignment]
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
