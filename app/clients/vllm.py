"""vLLM backend, in process: one AsyncLLM (V1 engine) owned by a background thread running its own event loop.

Streamlit reruns never touch that loop: each request is a coroutine submitted to it, whose outputs (DELTA kind:
only the new text) go to the shared streaming helper (app/clients/streaming.py). Every request has its own id,
so concurrent sessions are batched by vLLM and never mixed; Stop or a closed consumer aborts the request in the
engine. Prompts, stop tokens, the reply's parser and its grammar (forced calls, response formats) come from the
same ChatTemplate the transformers backend uses; the grammar reaches vLLM's structured outputs as EBNF. A
vision-language model gets the template's tokens with one placeholder per image plus the images as multi-modal
data: vLLM's own processor expands the placeholders (ids the HF processor already expanded would be expanded
twice).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

from app.clients.chat_template import ChatTemplate, PreparedPrompt
from app.clients.client_protocol import ClientError, ModelActivity
from app.clients.model_path import resolve_model_path
from app.clients.streaming import EngineFeed, EngineOutput, EngineRequest
from app.clients.template_client import LocalTemplateClient
from app.clients.vision import is_vision_config, load_processor
from app.config import ImageSettings, ModelSettings, offline_by_default

log = logging.getLogger(__name__)


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

        self.settings = settings
        self.model_path = resolve_model_path(settings.model_path)
        self._in_flight = 0  # requests of this process in the engine (activity())
        self._in_flight_lock = threading.Lock()
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
        processor = load_processor(self.model_path) if is_vision_config(config) else None
        if processor is not None:
            tokenizer = processor.tokenizer
        self.template = ChatTemplate(tokenizer, eos if isinstance(eos, list) else [eos], context, processor)
        # The most images one prompt may hold: vLLM reserves memory for that many (process_input keeps the newest).
        vision_limits = {"limit_mm_per_prompt": {"image": ImageSettings.from_env().max_per_prompt}} if processor else {}
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
            # A conversation's next turn and every request with the same system prompt and tools reuse the keys and
            # values already computed (on by default in vLLM's V1 engine for most models; stated, not assumed).
            enable_prefix_caching=True,
            **vision_limits,
        )
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="vllm-loop", daemon=True)
        self.loop_thread.start()
        try:
            self.engine = self._run(self._start(async_llm_cls), timeout=900)
        except Exception as exc:
            self._stop_loop()
            raise ClientError(f"vLLM could not start the engine for {self.model_path.name}: {exc}") from exc

    async def _start(self, async_llm_cls: Any) -> Any:
        return async_llm_cls.from_engine_args(self.engine_args)

    def _run(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def describe(self) -> str:
        config = self.engine.model_config
        parallel = ""
        options = self.settings.vllm
        if options.tensor_parallel_size > 1 or options.pipeline_parallel_size > 1:
            parallel = f" · TP {options.tensor_parallel_size} × PP {options.pipeline_parallel_size}"
        return f"vLLM · {self.model_path.name} · {config.dtype}{parallel} · context {self.context_window}"

    def sampling(self, prompt: PreparedPrompt) -> Any:
        params, grammar = prompt.params, prompt.grammar
        return self._sampling_cls(
            temperature=params.temperature,
            top_p=1.0 if params.greedy else params.top_p,
            top_k=0 if params.greedy else params.top_k,  # 0: no top-k cut
            repetition_penalty=params.repetition_penalty,
            max_tokens=prompt.max_new_tokens,
            stop=None,  # the shared streaming helper cuts stop strings for every backend alike
            stop_token_ids=list(self.stop_token_ids),
            seed=params.seed,
            ignore_eos=params.ignore_eos,
            output_kind=self._output_kind.DELTA,  # only the new text per step: no re-decoding, no diffing
            skip_special_tokens=True,
            structured_outputs=self._structured_cls(grammar=grammar) if grammar else None,
        )

    def engine_request(self, prompt: PreparedPrompt, cancel: threading.Event) -> EngineRequest:
        return _Request(self, prompt)

    def activity(self) -> ModelActivity:
        """The requests of this process in the engine; vLLM's scheduler batches them (and queues past its limit)."""
        scheduler = getattr(getattr(self.engine, "vllm_config", None), "scheduler_config", None)
        with self._in_flight_lock:
            return ModelActivity(generating=self._in_flight, waiting=0,
                                 at_once=int(getattr(scheduler, "max_num_seqs", 0) or 1))

    def engine_error(self, error: BaseException) -> ClientError:
        return ClientError.engine_failed("vLLM", error)

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=10)

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


class _Request:
    """One request on the shared engine: a coroutine on the client's loop that hands vLLM's outputs on."""

    def __init__(self, client: VLLMClient, prompt: PreparedPrompt) -> None:
        self.client, self.prompt = client, prompt
        self.sampling = client.sampling(prompt)
        self.request_id = f"demo-{uuid.uuid4().hex}"  # its own id: concurrent sessions are batched, never mixed

    def start(self, feed: EngineFeed) -> None:
        asyncio.run_coroutine_threadsafe(self._produce(feed), self.client.loop)

    def abort(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.engine.abort(self.request_id), self.client.loop)

    async def _produce(self, feed: EngineFeed) -> None:
        with self.client._in_flight_lock:
            self.client._in_flight += 1
        try:
            encoded = self.prompt.encoded
            request: dict[str, Any] = {"prompt_token_ids": self.prompt.token_ids}
            if encoded.images:
                request = {"prompt_token_ids": encoded.template_token_ids,
                           "multi_modal_data": {"image": encoded.images}}
            async for output in self.client.engine.generate(request, self.sampling, self.request_id):
                completion = output.outputs[0]
                feed.put(EngineOutput(text=completion.text, tokens=len(completion.token_ids),
                                      finish_reason=completion.finish_reason,
                                      cached_tokens=getattr(output, "num_cached_tokens", None)))
        except Exception as exc:  # reported to the consumer, never lost in the loop
            feed.fail(exc)
        finally:
            with self.client._in_flight_lock:
                self.client._in_flight -= 1
            feed.close()
