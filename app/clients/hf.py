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
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList

from app.chat_format import PromptTooLong, fit_to_context
from app.clients.base import ClientError, Delta, GenerationParams, ToolRequest
from app.clients.constrained import ConstrainedDecoding
from app.clients.incremental_streamer import IncrementalTextStreamer
from app.clients.stop_strings import StopStringFilter
from app.config import ModelSettings, offline_by_default
from app.conversation import AnswerMetrics, ToolCall
from app.dialects import Dialect, StreamParser, detect_dialect, get_dialect
from app.dialects.base import ForcedBodyParser

log = logging.getLogger(__name__)

# Used only when a model ships no chat template at all (base models): plain ChatML.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') "
    "+ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_WAIT_NOTICE_AFTER_S = 0.5
_PROBE = "\u2063probe-answer\u2063"
_PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "Probe.",
                                                "parameters": {"type": "object", "properties": {}}}}


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


class HFClient:
    backend = "hf"

    def __init__(self, settings: ModelSettings) -> None:
        offline_by_default()
        self.settings = settings
        self.device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype, self.device)
        self.model_path = resolve_model_path(settings.model_path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            load_kwargs: dict[str, Any] = {"dtype": dtype}
            if self.device == "cuda":
                load_kwargs["device_map"] = "auto"  # spreads a large model over every visible GPU
            self.model = AutoModelForCausalLM.from_pretrained(self.model_path, **load_kwargs)
        except Exception as exc:  # loaders raise many types (OSError, SafetensorError, ValueError...)
            raise ClientError(f"Could not load the model from {str(self.model_path)!r}: {exc}") from exc
        if self.device != "cuda":
            self.model.to(self.device)
        self.model.eval()
        self.uses_fallback_template = not getattr(self.tokenizer, "chat_template", None)
        if self.uses_fallback_template:
            self.tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        self.context_window = self._context_window()
        self.dialect = detect_dialect(self.tokenizer.chat_template)
        self.dialect_name = self.dialect.name
        self.native_tools = self._template_renders_tools(self.dialect)
        self.tool_role = self._template_accepts_tool_role()
        self.stop_token_ids = self._stop_token_ids()
        self._constrained = ConstrainedDecoding(self.tokenizer, self.model, self.stop_token_ids)
        self._lock = threading.Lock()
        self._generation_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")
        log.info("Loaded %s on %s (%s), context %d", self.model_path, self.device, dtype, self.context_window)

    # ----- derived model facts -------------------------------------------------------------------------

    def _context_window(self) -> int:
        if self.settings.max_context_tokens > 0:
            return self.settings.max_context_tokens
        config = self.model.config
        for attribute in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"):
            value = getattr(config, attribute, None) or getattr(config.get_text_config(), attribute, None)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(self.tokenizer, "model_max_length", 0)
        return limit if 0 < limit < 10_000_000 else 2048

    def _stop_token_ids(self) -> list[int]:
        """EOS from the generation config and tokenizer, plus the token the chat template closes a turn with."""
        ids: list[int] = []
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            for token_id in source if isinstance(source, list) else [source]:
                if isinstance(token_id, int) and token_id not in ids:
                    ids.append(token_id)
        end_of_turn = self._end_of_turn_token_id()
        if end_of_turn is not None and end_of_turn not in ids:
            ids.append(end_of_turn)
        for text in self.dialect.stop_strings:  # e.g. GLM-4's <|observation|>, which ends a reply after a call
            token_id = self._single_token_id(text)
            if token_id is not None and token_id not in ids:
                ids.append(token_id)
        return ids

    def _single_token_id(self, text: str) -> int | None:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 else None

    def _template_accepts_tool_role(self) -> bool:
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"},
                    {"role": "tool", "content": _PROBE}]
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:  # templates that insist on user/assistant alternation
            return False
        return isinstance(text, str) and _PROBE in text

    def _template_renders_tools(self, dialect: Dialect) -> bool:
        """Does the chat template show tools to the model? If not (SmolLM2, base models), the dialect's fallback
        system prompt describes them instead."""
        try:
            prompt = dialect.render([{"role": "user", "content": "hi"}], [_PROBE_TOOL], native=True)
            text = self.tokenizer.apply_chat_template(
                prompt.messages, tools=prompt.tools, add_generation_prompt=True, tokenize=False
            )
        except Exception:  # a template that rejects tools cannot render them
            return False
        return isinstance(text, str) and _PROBE_TOOL["function"]["name"] in text

    def _end_of_turn_token_id(self) -> int | None:
        """Render a one-answer chat and look at the first token after the answer: a special token there closes
        the assistant turn (<|im_end|>, <|eot_id|>, <end_of_turn>...), whatever the model family."""
        try:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}], tokenize=False
            )
        except Exception:  # a template that rejects this shape simply gives no extra stop token
            return None
        if not isinstance(rendered, str) or _PROBE not in rendered:
            return None
        tail = rendered.split(_PROBE, 1)[1]
        tail_ids = self.tokenizer(tail, add_special_tokens=False)["input_ids"]
        special_ids = set(self.tokenizer.all_special_ids) | {
            token_id for token_id, token in self.tokenizer.added_tokens_decoder.items() if token.special
        }
        return tail_ids[0] if tail_ids and tail_ids[0] in special_ids else None

    def describe(self) -> str:
        name = self.model_path.name
        template = ", generic chat template" if self.uses_fallback_template else ""
        return f"transformers · {name} · {self.device} · {self.model.dtype}{template} · context {self.context_window}"

    def dialect_for(self, tools: ToolRequest | None) -> Dialect:
        if tools is not None and tools.dialect:
            try:
                return get_dialect(tools.dialect)
            except ValueError as exc:
                raise ClientError(str(exc)) from exc
        return self.dialect

    # ----- prompting -------------------------------------------------------------------------------------

    def count_prompt_tokens(self, messages: list[dict[str, Any]], tools: ToolRequest | None = None) -> int:
        return len(self._render(messages, tools))

    def _render(self, messages: list[dict[str, Any]], tools: ToolRequest | None = None) -> list[int]:
        """Prompt token ids: the dialect puts tools, past calls and results where this model expects them."""
        prompt = self.dialect_for(tools).render(
            messages, tools.active_tools if tools else None, self.native_tools, self.tool_role
        )
        encoded = self.tokenizer.apply_chat_template(
            prompt.messages, tools=prompt.tools, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(encoded["input_ids"])

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
        dialect = self.dialect_for(tools)
        # Reserve room for the answer, but never more than half the window: a large "max new tokens" on a small
        # model should shorten the answer's room, not drop the whole history.
        reserve = min(params.max_new_tokens, max(1, self.context_window // 2))
        try:
            fitted = fit_to_context(
                messages, lambda candidate: self.count_prompt_tokens(candidate, tools), self.context_window - reserve
            )
        except PromptTooLong as exc:
            raise ClientError(str(exc)) from exc
        except Exception as exc:  # a template that cannot render these messages
            raise ClientError(f"The model's chat template could not render the conversation: {exc}") from exc
        max_new_tokens = min(params.max_new_tokens, self.context_window - fitted.token_count)
        metrics.prompt_tokens = fitted.token_count
        metrics.dropped_messages = fitted.dropped_messages
        if fitted.dropped_messages:
            yield Delta(
                notice=f"Dropped the {fitted.dropped_messages} oldest message(s) so the prompt fits the "
                f"{self.context_window}-token context window.",
                metrics=metrics,
            )

        finished = threading.Event()  # set when the consumer goes away: stops generate() too
        active_tools = tools.active_tools if tools else []
        # A dialect stop string that is not one token of this vocabulary is matched on the text instead.
        text_stops = [s for s in dialect.stop_strings if self._single_token_id(s) not in self.stop_token_ids]
        stop_filter = StopStringFilter((*params.stop, *text_stops) if active_tools else params.stop)
        parser: StreamParser | None = (
            dialect.stream_parser([tool["function"]["name"] for tool in active_tools]) if active_tools else None
        )
        streamer = IncrementalTextStreamer(self.tokenizer, on_token=lambda n: setattr(metrics, "completion_tokens", n))
        input_ids = torch.tensor([self._render(fitted.messages, tools)], device=self.model.device)
        generate_kwargs = self._generate_kwargs(params, max_new_tokens)
        forced_tools = tools.forced_tools if tools else []
        # A free-text code body only when it is the one allowed call: then the whole reply is that call.
        forced = [dialect.constrained_call(tool, allow_code_body=len(forced_tools) == 1) for tool in forced_tools]
        if len(forced) == 1 and forced[0].body_argument:
            parser = ForcedBodyParser(forced[0])
        if forced:
            try:
                generate_kwargs["logits_processor"] = self._constrained.logits_processors(forced)
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
        if forced and not calls and metrics.finish_reason == "length":
            raise ClientError(
                f"The model did not finish the tool call within {max_new_tokens} new tokens. Raise 'Max new tokens' "
                "and try again."
            )
        if calls:
            metrics.finish_reason = "tool_calls"
        yield Delta(finish_reason=metrics.finish_reason, metrics=metrics, tool_calls=list(calls))

    def _generate_kwargs(self, params: GenerationParams, max_new_tokens: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "eos_token_id": self.stop_token_ids or None,
            "pad_token_id": self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else (self.stop_token_ids[0] if self.stop_token_ids else None),
            "repetition_penalty": params.repetition_penalty,
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
        metrics.total_time_s = time.perf_counter() - started
        first, last = streamer.first_token_time, streamer.last_token_time
        if first is not None and last is not None and metrics.completion_tokens > 1 and last > first:
            metrics.tokens_per_second = (metrics.completion_tokens - 1) / (last - first)
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
