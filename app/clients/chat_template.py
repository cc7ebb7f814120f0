"""What a local backend (transformers, vLLM or llama.cpp) needs to know about a model's chat template, and turning
OpenAI messages plus tools (and, for a vision-language model, pictures) into prompt token ids with it: the tool-call
dialect, whether the template renders tools, stop tokens, fitting into the context window, and the parser and
grammar for the reply (`ChatTemplate.prepare`); a legacy completion's raw prompt (`ChatTemplate.prepare_raw`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.clients.client_protocol import ClientError, GenerationParams, ResponseFormat, ToolRequest
from app.clients.raw_prompt import raw_prompt_ids
from app.clients.vision import NO_VISION, PromptImages, has_images
from app.config import SchemaLimits
from app.domain.chat_messages import ChatMessage
from app.limits.schema_limits import schema_size_problem
from app.prompting.chat_format import PromptTooLong, ResponseProcessor, fit_to_context, process_response
from app.prompting.dialects import ConstrainedCall, Dialect, detect_dialect, get_dialect
from app.prompting.dialects.constraint import call_ebnf, reply_ebnf
from app.prompting.thinking import THINK_TAGS

# The least room a prompt must leave for its answer: a prompt longer than the usual budget (the context window less
# min(max new tokens, half the window)) is still answered while it leaves this much.
MIN_ANSWER_TOKENS = 64
# Used only when a model ships no chat template at all (base models): plain ChatML.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') "
    "+ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_PROBE = "\u2063probe-answer\u2063"
_PROBE_TOOL: dict[str, Any] = {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "Probe.",
                                                                "parameters": {"type": "object", "properties": {}}}}


@dataclass
class Encoded:
    """A rendered prompt. Without images the two id lists are the same."""

    token_ids: list[int]  # what the model reads: each image placeholder expanded to that image's tokens
    template_token_ids: list[int]  # the template's text as tokens, one placeholder per image (vLLM expands them)
    text: str = ""  # the template's text
    images: list[Any] = field(default_factory=list)  # PIL images, in prompt order
    image_inputs: dict[str, Any] = field(default_factory=dict)  # the processor's tensors (pixel_values...)


@dataclass
class PreparedPrompt:
    """Everything a local backend needs to generate one reply."""

    token_ids: list[int]
    max_new_tokens: int
    dropped_messages: int
    notice: str | None
    processor: ResponseProcessor  # stop strings and the reply's parser (app/prompting/chat_format.py)
    grammar: str | None  # EBNF the reply must follow (a forced call, a response format), or None
    params: GenerationParams  # the settings to generate with (see `ChatTemplate.prepare`)
    encoded: Encoded  # the prompt as rendered: its images and the template's own token ids too


class ChatTemplate:
    """`processor`: a vision-language model's processor. Its chat template (the one that knows image parts) is
    used, and pictures in user messages are rendered through it; without one, a prompt with pictures is refused."""

    def __init__(self, tokenizer: Any, eos_token_ids: Sequence[int | None], context_window: int,
                 processor: Any = None) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        if processor is not None and isinstance(getattr(processor, "chat_template", None), str):
            tokenizer.chat_template = processor.chat_template
        self.uses_fallback_template = not getattr(tokenizer, "chat_template", None)
        if self.uses_fallback_template:
            tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        self.context_window = context_window
        source = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
        # A reasoning model's template knows its thought markers; one with a switch takes enable_thinking (Qwen3,
        # SmolLM3 and others read that name).
        self.thinking_markers = THINK_TAGS if THINK_TAGS.open in source or THINK_TAGS.close in source else None
        self.thinking_switch = "enable_thinking" in source
        self.dialect = detect_dialect(tokenizer.chat_template)
        self.native_tools = self._renders_tools(self.dialect)
        self.tool_role = self._accepts_tool_role()
        self.stop_token_ids = self._stop_token_ids(eos_token_ids)

    @property
    def vision(self) -> bool:
        return self.processor is not None

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
              add_generation_prompt: bool = True) -> str:
        """The chat template's text for text-only messages (a vision template gets every content as parts)."""
        if self.vision:
            messages = PromptImages(self.processor).template_messages(messages)[0]
        text: str = self.tokenizer.apply_chat_template(messages, tools=tools,
                                                       add_generation_prompt=add_generation_prompt, tokenize=False)
        return text

    # ----- facts about the template ------------------------------------------------------------------------

    def _stop_token_ids(self, eos_token_ids: Sequence[int | None]) -> list[int]:
        """EOS from the generation config and tokenizer, the token the chat template closes a turn with, and
        single-token dialect stops (GLM-4's <|observation|>)."""
        ids: list[int] = []
        for token_id in [*eos_token_ids, self.tokenizer.eos_token_id, self._end_of_turn_token_id(),
                         *(self.single_token_id(text) for text in self.dialect.stop_strings)]:
            if isinstance(token_id, int) and token_id not in ids:
                ids.append(token_id)
        return ids

    def single_token_id(self, text: str) -> int | None:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 else None

    def _accepts_tool_role(self) -> bool:
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"},
                    {"role": "tool", "content": _PROBE}]
        try:
            text = self.apply(messages)
        except Exception:  # templates that insist on user/assistant alternation
            return False
        return isinstance(text, str) and _PROBE in text

    def _renders_tools(self, dialect: Dialect) -> bool:
        """Does the chat template show tools to the model? If not (SmolLM2, base models), the dialect's fallback
        system prompt describes them instead."""
        try:
            prompt = dialect.render([{"role": "user", "content": "hi"}], [_PROBE_TOOL], native=True)
            text = self.apply(prompt.messages, prompt.tools)
        except Exception:  # a template that rejects tools cannot render them
            return False
        return isinstance(text, str) and _PROBE_TOOL["function"]["name"] in text

    def _end_of_turn_token_id(self) -> int | None:
        """Render a one-answer chat and look at the first token after the answer: a special token there closes
        the assistant turn (<|im_end|>, <|eot_id|>, <end_of_turn>...), whatever the model family."""
        try:
            rendered = self.apply([{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}],
                                  add_generation_prompt=False)
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

    # ----- prompts -----------------------------------------------------------------------------------------

    def dialect_for(self, tools: ToolRequest | None) -> Dialect:
        if tools is not None and tools.dialect:
            try:
                return get_dialect(tools.dialect)
            except ValueError as exc:
                raise ClientError(str(exc)) from exc
        return self.dialect

    def render(self, messages: list[ChatMessage], tools: ToolRequest | None = None,
               images: PromptImages | None = None, thinking: bool | None = None) -> Encoded:
        """The prompt: the dialect puts tools, past calls and results where this model expects them; the processor
        turns the pictures into the model's image tokens and tensors (`images` decodes them, once per prompt).
        `thinking` turns a reasoning model's thought on or off where its template has the switch (None: the
        template's default)."""
        prompt = self.dialect_for(tools).render(
            messages, tools.active_tools if tools else None, self.native_tools, self.tool_role
        )
        pictures: list[Any] = []
        template_messages = prompt.messages
        if self.vision:
            images = images or PromptImages(self.processor)
            template_messages, pictures = images.template_messages(prompt.messages)
        switch = {"enable_thinking": thinking} if self.thinking_switch and thinking is not None else {}
        text = self.tokenizer.apply_chat_template(template_messages, tools=prompt.tools, add_generation_prompt=True,
                                                  tokenize=False, **switch)
        template_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not pictures:
            return Encoded(template_ids, template_ids, text)
        assert images is not None
        token_ids, tensors = images.encode(text, pictures)
        return Encoded(token_ids, template_ids, text, pictures, tensors)

    def prepare(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        tools: ToolRequest | None,
        response_format: ResponseFormat | None = None,
    ) -> PreparedPrompt:
        """The prompt that fits the context window, and the rules of the reply: its grammar and its processor."""
        if not self.vision and has_images(messages):
            raise ClientError(NO_VISION)
        _check_grammar_sizes(tools, response_format)
        encoded, dropped = self._fit(messages, params, tools)
        token_ids = encoded.token_ids
        dialect = self.dialect_for(tools)
        active_tools = tools.active_tools if tools else []
        forced_tools = tools.forced_tools if tools else []
        # A free-text code body only when it is the one allowed call: then the whole reply is that call.
        forced = [dialect.constrained_call(tool, allow_code_body=len(forced_tools) == 1) for tool in forced_tools]
        if forced:
            # The grammar already rules out loops; a repetition penalty only bends the call (JSON repeats its
            # quotes, arguments are copied from the prompt): SmolLM2 at 1.1 wrote calculator({"expression":
            # "{10}"}) for "What is 17 * 23?" (vLLM counts the prompt), or never closed the call (HF, answer only).
            params = replace(params, repetition_penalty=1.0)
        # A dialect stop string that is not one token of this vocabulary is matched on the text instead.
        text_stops = [s for s in dialect.stop_strings if self.single_token_id(s) not in self.stop_token_ids]
        notice = None
        if dropped:
            notice = (f"Dropped the {dropped} oldest message(s) so the prompt fits the {self.context_window}-token "
                      "context window.")
        return PreparedPrompt(
            token_ids=token_ids,
            max_new_tokens=min(params.max_new_tokens, self.context_window - len(token_ids)),
            dropped_messages=dropped,
            notice=notice,
            processor=process_response(dialect, active_tools, forced,
                                       (*params.stop, *text_stops) if active_tools else params.stop,
                                       self.thinking_markers, self._opens_thought(encoded.text),
                                       parallel_calls=tools.parallel_calls if tools else True),
            grammar=_grammar(forced, dialect, active_tools, response_format),
            params=params,
            encoded=encoded,
        )

    def prepare_raw(self, prompt: str | list[int], params: GenerationParams,
                    suffix: str | None = None) -> PreparedPrompt:
        """A legacy completion's prompt, as given (app/clients/raw_prompt.py; no template, no grammar) and its reply as
        plain text cut at the stop strings. Refused when it leaves no room in the context window for an answer:
        unlike a conversation, a raw prompt has no messages to drop."""
        token_ids = raw_prompt_ids(self.tokenizer, prompt, suffix)
        if len(token_ids) >= self.context_window:
            raise ClientError(f"The prompt has {len(token_ids)} tokens, which leaves no room in the model's "
                              f"{self.context_window}-token context window: shorten it.")
        text = prompt if isinstance(prompt, str) else ""
        return PreparedPrompt(
            token_ids=token_ids,
            max_new_tokens=min(params.max_new_tokens, self.context_window - len(token_ids)),
            dropped_messages=0,
            notice=None,
            processor=process_response(None, [], (), params.stop),
            grammar=None,
            params=params,
            encoded=Encoded(token_ids, token_ids, text),
        )

    def _opens_thought(self, prompt: str) -> bool:
        """The generation prompt ends inside a thought (DeepSeek-R1's and QwQ's templates open it for the model)."""
        return self.thinking_markers is not None and prompt.rstrip().endswith(self.thinking_markers.open)

    def _fit(self, messages: list[ChatMessage], params: GenerationParams,
             tools: ToolRequest | None) -> tuple[Encoded, int]:
        """The newest turns that fit, rendered, and how many messages were dropped."""
        # Reserve room for the answer, but never more than half the window: a large "max new tokens" on a small
        # model should shorten the answer's room, not drop the whole history.
        reserve = min(params.max_new_tokens, max(1, self.context_window // 2))
        budget = self.context_window - reserve
        fitting: dict[int, Encoded] = {}  # each candidate that fit, rendered, by its message count
        images = PromptImages(self.processor) if self.vision else None

        def count(candidate: list[ChatMessage]) -> int:
            encoded = self.render(candidate, tools, images, params.thinking)
            if len(encoded.token_ids) <= budget:
                fitting[len(candidate)] = encoded
            return len(encoded.token_ids)

        if not params.truncate:  # counted once: over the window, refused at once (the API's truncation=disabled)
            try:
                encoded = self.render(messages, tools, images, params.thinking)
            except Exception as exc:
                raise ClientError(f"The model's chat template could not render the conversation: {exc}") from exc
            floor = min(reserve, MIN_ANSWER_TOKENS)
            if len(encoded.token_ids) > self.context_window - floor:
                raise ClientError(
                    f"The input has {len(encoded.token_ids)} tokens, but this model's context window holds "
                    f"{self.context_window}, and at least {floor} of them must stay free for the answer; with "
                    "truncation disabled nothing is dropped: shorten the input, or send truncation=auto.")
            return encoded, 0
        try:
            try:
                fitted = fit_to_context(messages, count, budget)
            except PromptTooLong as exc:
                # The newest turn alone is longer than the room left beside the answer's: it is still answered
                # (alone) while it leaves the answer MIN_ANSWER_TOKENS, as llama-server and vLLM answer any prompt
                # that fits, the answer shortened. (Codex sends no output limit: the answer's room was half the
                # window, and an 8,084-token prompt was refused on an 8,192-token model.)
                floor = min(reserve, MIN_ANSWER_TOKENS)
                if exc.needed > self.context_window - floor:
                    raise ClientError(
                        f"The prompt has {exc.needed} tokens, but this model's context window holds "
                        f"{self.context_window}, and at least {floor} of them must stay free for the answer: "
                        "shorten the message or the system prompt, or use a model with a longer context window."
                    ) from exc
                budget = exc.needed  # (read by `count` too)
                fitted = fit_to_context(messages, count, budget)
        except ClientError:
            raise
        except Exception as exc:  # a template that cannot render these messages
            raise ClientError(f"The model's chat template could not render the conversation: {exc}") from exc
        return fitting[len(fitted.messages)], fitted.dropped_messages


def _check_grammar_sizes(tools: ToolRequest | None, response_format: ResponseFormat | None) -> None:
    """Refuse, before any other work, the schemas a grammar would be built from that are too large to build one
    from in reasonable time (app/limits/schema_limits.py). The API server checks its requests earlier; this covers the
    pages and MCP tools."""
    limits = SchemaLimits.from_env()
    for tool in tools.forced_tools if tools else []:
        if (problem := schema_size_problem(tool["function"].get("parameters") or {}, limits)) is not None:
            raise ClientError(f"The parameters of {tool['function']['name']} cannot be enforced as a grammar: "
                              f"{problem}.")
    if response_format is not None and response_format.constrained:
        schemas = [response_format.schema or {}, *((t["function"].get("parameters") or {})
                                                   for t in (tools.active_tools if tools else []))]
        for schema in schemas:
            if (problem := schema_size_problem(schema, limits)) is not None:
                raise ClientError(f"The response format's JSON Schema (or an offered tool's) cannot be enforced: "
                                  f"{problem}.")


def _grammar(forced: list[ConstrainedCall], dialect: Dialect, offered: list[dict[str, Any]],
             response_format: ResponseFormat | None) -> str | None:
    """EBNF for the reply: one of the `forced` calls; else, with a JSON response format, that JSON or a call to one
    of the `offered` tools; else none (free text)."""
    if forced:
        try:
            return call_ebnf(forced)
        except Exception as exc:  # xgrammar refuses schemas it cannot turn into a grammar
            raise ClientError("The parameters of the tool to call cannot be enforced as a grammar: "
                              f"{_grammar_problem(exc)}") from exc
    if response_format is None or not response_format.constrained:
        return None
    try:
        return reply_ebnf([dialect.json_call(tool) for tool in offered], response_format.schema)
    except Exception as exc:  # xgrammar refuses schemas it cannot turn into a grammar
        raise ClientError(f"The response format's JSON Schema cannot be enforced: {_grammar_problem(exc)}") from exc


def _grammar_problem(error: Exception) -> str:
    """xgrammar's complaint without the "[time] source-file:line:" prefix of its C++ logs (no server internals in
    an API answer)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", lines[-1].strip())
