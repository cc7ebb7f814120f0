"""The spans of a turn, named and described as OpenTelemetry's GenAI semantic conventions say:

- `invoke_agent composite-demo`: the whole turn (a resumed one is a turn of its own);
- `chat {model}`: each model call, with the request's sampling settings and the response's finish reason, tokens
  in (and of those, read from the prompt cache), tokens out (and of those, thought) and time to the first chunk;
- `execute_tool {tool}`: each tool call, with its run policy, the user's decision and how long it waited for it,
  its result's size and its error;
- `{mcp.method.name} {target}` (e.g. `tools/call search`): each request to an MCP server, as the MCP conventions
  name it, a child of the tool call that made it (the app's own MCP server is traced by the SDK's middleware).

Spans are started and ended explicitly. Within a turn each is given its parent (never the "current" span): the loop
is a generator whose steps may run on any thread. A turn's own span, an API request's model call and an MCP request
made outside a tool call belong to whatever span is current where they start (an API request's, or none).

Prompt and answer text go into spans only when the person turned content capture on
(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true), as the conventions say."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from app.domain.conversation import AnswerMetrics, Message, ToolCall
from app.domain.generation_params import GenerationParams

AGENT = "composite-demo"
_TRACER = "composite-demo"
MAX_CAPTURED_CHARS = 100_000


def capturing_content() -> bool:
    return os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"


_provider: trace.TracerProvider | None = None  # None: the process's (setup.py); a test sets its own


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Spans from `provider` instead of the process's (None: back to the process's)."""
    global _provider
    _provider = provider


def _tracer() -> trace.Tracer:
    return (_provider or trace.get_tracer_provider()).get_tracer(_TRACER)


def start_turn(model: str, provider: str) -> tuple[Span, Context]:
    span = _tracer().start_span(f"invoke_agent {AGENT}", kind=SpanKind.INTERNAL, attributes={
        gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent", gen_ai.GEN_AI_AGENT_NAME: AGENT,
        gen_ai.GEN_AI_PROVIDER_NAME: provider, gen_ai.GEN_AI_REQUEST_MODEL: model})
    return span, trace.set_span_in_context(span)


def context_of(span: Span) -> Context:
    """A context in which `span` is current: what work done for it (a tool's thread) starts from."""
    return trace.set_span_in_context(span)


def trace_id(span: Span) -> str:
    """The span's trace, as hex (what an answer keeps to find its timeline); "" when not recorded."""
    context = span.get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def start_chat(parent: Context | None, model: str, provider: str, params: GenerationParams,
               messages: list[Any] | None = None, operation: str = "chat") -> Span:
    """A model call's span (`operation`: "chat", or "text_completion" for a raw prompt); `parent`: None for the
    current context's span (an API request's)."""
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: operation, gen_ai.GEN_AI_PROVIDER_NAME: provider,
        gen_ai.GEN_AI_REQUEST_MODEL: model, gen_ai.GEN_AI_REQUEST_TEMPERATURE: params.temperature,
        gen_ai.GEN_AI_REQUEST_TOP_P: params.top_p, gen_ai.GEN_AI_REQUEST_TOP_K: params.top_k,
        gen_ai.GEN_AI_REQUEST_MAX_TOKENS: params.max_new_tokens, gen_ai.GEN_AI_REQUEST_STREAM: True}
    if params.seed is not None:
        attributes[gen_ai.GEN_AI_REQUEST_SEED] = params.seed
    if messages is not None and capturing_content():
        attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(messages)
    return _tracer().start_span(f"{operation} {model}", context=parent, kind=SpanKind.CLIENT, attributes=attributes)


def end_chat(span: Span, answer: Message) -> None:
    _usage(span, answer.metrics or AnswerMetrics(), answer.model)
    if capturing_content():
        span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _json([{
            "role": "assistant", "content": answer.content,
            "tool_calls": [call.to_openai() for call in answer.tool_calls]}]))
    if answer.error:
        span.set_status(Status(StatusCode.ERROR, answer.error[:500]))
        span.set_attribute("error.type", "backend_error")
    span.end()


def end_generation(span: Span, metrics: AnswerMetrics | None, model: str, ended: str) -> None:
    """An API request's model call ended (`ended`: its finish reason, "cancelled" or "error"): its usage, as
    end_chat records an answer's. A span ended already is left as it is."""
    if not span.is_recording():
        return
    _usage(span, metrics or AnswerMetrics(), model)
    if metrics is None or not metrics.finish_reason:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [ended])
    if ended == "error":
        span.set_status(Status(StatusCode.ERROR, "the generation failed"))
        span.set_attribute("error.type", "backend_error")
    span.end()


def _usage(span: Span, metrics: AnswerMetrics, model: str) -> None:
    span.set_attribute(gen_ai.GEN_AI_RESPONSE_MODEL, model)
    span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, metrics.prompt_tokens)
    span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, metrics.completion_tokens)
    span.set_attribute(gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, metrics.cached_tokens)
    if metrics.thinking_tokens:
        span.set_attribute(gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, metrics.thinking_tokens)
    if metrics.time_to_first_token_s is not None:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, metrics.time_to_first_token_s)
    if metrics.finish_reason:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [metrics.finish_reason])


def start_tool(parent: Context, call: ToolCall, policy: str | None, decision: str | None = None) -> Span:
    """`decision`: the user's, where the call waited for one ("run", "edited" or "deny"); the wait itself, from
    `call.asked_at` to now, is `app.tool.approval_wait_s`."""
    attributes: dict[str, Any] = {gen_ai.GEN_AI_OPERATION_NAME: "execute_tool", gen_ai.GEN_AI_TOOL_NAME: call.name,
                                  gen_ai.GEN_AI_TOOL_CALL_ID: call.id, gen_ai.GEN_AI_TOOL_TYPE: "function"}
    if policy:
        attributes["app.tool.policy"] = policy
    if decision:
        attributes["app.tool.decision"] = decision
    if decision is not None and call.asked_at is not None:  # only when it was decided now, not on a later resume
        attributes["app.tool.approval_wait_s"] = max(0.0, time.time() - call.asked_at)
    if capturing_content():
        attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(call.arguments)
    return _tracer().start_span(f"execute_tool {call.name}", context=parent, kind=SpanKind.INTERNAL,
                                attributes=attributes)


def end_tool(span: Span, message: Message | None) -> None:
    if message is not None:
        span.set_attribute("app.tool.status", message.tool_status or "")
        span.set_attribute("app.tool.result_chars", len(message.display_text or message.content))
        if capturing_content():
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, (message.display_text or message.content)
                               [:MAX_CAPTURED_CHARS])
        if message.tool_status in ("failed", "denied", "stopped"):
            span.set_status(Status(StatusCode.ERROR, message.tool_status))
            span.set_attribute("error.type", message.tool_status)
    span.end()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:MAX_CAPTURED_CHARS]


@contextmanager
def mcp_request(server: str, transport: str | None, method: str, target: str = "", parent: Context | None = None,
                protocol_version: str | None = None) -> Iterator[Span]:
    """A CLIENT span around one request to MCP server `server` (`method`: `tools/call`, `prompts/get`, ...; `target`:
    the tool, the prompt or the resource it names), current while it runs: the SDK's own span for the message it
    sends ("MCP send ...", which carries the trace to the server) is its child. An exception leaving it marks it
    failed with the exception's type (its text, which may quote a result, only with content capture on).
    `parent`: the span it belongs to (None: the current context's). The app's own MCP server needs none of this:
    the SDK's middleware spans each request it answers."""
    attributes: dict[str, Any] = {"mcp.method.name": method, "app.mcp.server": server}
    if transport:
        attributes["network.transport"] = "pipe" if transport == "stdio" else "tcp"
    if method == "tools/call":
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = "execute_tool"
        attributes[gen_ai.GEN_AI_TOOL_NAME] = target
    elif method == "prompts/get":
        attributes[gen_ai.GEN_AI_PROMPT_NAME] = target
    elif method == "resources/read":
        attributes["mcp.resource.uri"] = target
    if protocol_version:
        attributes["mcp.protocol.version"] = protocol_version
    span = _tracer().start_span(f"{method} {target}".strip(), context=parent, kind=SpanKind.CLIENT,
                                attributes=attributes)
    token = otel_context.attach(trace.set_span_in_context(span))  # within one task: detached in the same one
    try:
        yield span
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__name__)
        span.set_status(Status(StatusCode.ERROR, str(exc)[:500] if capturing_content() else type(exc).__name__))
        raise
    finally:
        otel_context.detach(token)
        span.end()
