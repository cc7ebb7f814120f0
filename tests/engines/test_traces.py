"""Traces of a tool-loop turn on the tiny model (its calculator call forced), exported over OTLP/HTTP to a receiver
on 127.0.0.1, as a collector (Jaeger, Grafana Tempo) would get them: the turn, its two model calls and its tool
call, named and described as the GenAI semantic conventions say, parent and children as they happened. With content
capture off (the default) no prompt or answer text is in any span; on, it is. The app's own timeline has the same
spans, from memory. A call to an MCP server's tool that waited for the user's approval carries its wait and
decision, and the request to the server is a child span of it. The app's own MCP server traces each call it
answers."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from app.agent.loop import Decision, ToolSettings, resume_turn, run_turn
from app.clients.client_protocol import GenerationParams
from app.config import McpSettings
from app.domain.conversation import Conversation, Message
from app.mcp_client import McpManager, mcp_registry
from app.telemetry import spans
from app.telemetry.timeline import TimelineProcessor
from app.tools import load_tools
from harness.local_http import serve
from tests.api.test_mcp_client import SERVER, write_config

QUESTION = "What is 6 * 7? Secret word: marmalade."


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """A collector's OTLP/HTTP trace endpoint on 127.0.0.1: the base URL, and the export requests it received."""
    received: list[ExportTraceServiceRequest] = []

    def traces(_handler: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received.append(request)
        return 200, {"Content-Type": "application/x-protobuf"}, b""

    with serve({"/v1/traces": traces}) as url:
        yield url, received


@contextmanager
def collector() -> Iterator[tuple[TracerProvider, list[Any]]]:
    """A provider exporting over OTLP/HTTP to a receiver on 127.0.0.1, and the spans it received (once flushed)."""
    with otlp_receiver() as (url, received):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
        spans.use_provider(provider)
        got: list[Any] = []
        try:
            yield provider, got
            provider.force_flush()
        finally:
            spans.use_provider(None)
            provider.shutdown()
        got.extend(span for request in received for resource in request.resource_spans
                   for scope in resource.scope_spans for span in scope.spans)


def _attributes(span: Any) -> dict[str, Any]:
    return {a.key: _value(a) for a in span.attributes}


def _value(attribute: Any) -> Any:
    value = attribute.value
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(type("A", (), {"value": item})()) for item in value.array_value.values]
    return getattr(value, kind)


@pytest.mark.parametrize("capture", [False, True])
def test_a_tool_loop_turn_reaches_a_collector_as_genai_spans(tiny_client, monkeypatch, capture):
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    timeline = TimelineProcessor()
    with otlp_receiver() as (url, received):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
        provider.add_span_processor(timeline)
        spans.use_provider(provider)
        try:
            conversation = Conversation([Message("user", QUESTION)])
            tools = ToolSettings(load_tools().subset(["calculator"]), choice="calculator", max_rounds=2)
            events = list(run_turn(tiny_client, conversation, GenerationParams(temperature=0.0, max_new_tokens=96),
                                   tools=tools))
            provider.force_flush()
        finally:
            spans.use_provider(None)
            provider.shutdown()
    assert type(events[-1]).__name__ == "TurnDone"
    got = [span for request in received for resource in request.resource_spans for scope in resource.scope_spans
           for span in scope.spans]
    by_name = {span.name: span for span in got}
    model = tiny_client.capabilities.model_id
    assert sorted(by_name) == sorted(["invoke_agent composite-demo", f"chat {model}", "execute_tool calculator"])
    assert [span.name for span in got].count(f"chat {model}") == 2  # the call, then the answer
    turn = by_name["invoke_agent composite-demo"]
    children = [span for span in got if span is not turn]
    assert all(span.parent_span_id == turn.span_id and span.trace_id == turn.trace_id for span in children)
    chats = [span for span in got if span.name.startswith("chat ")]
    first = {a.key: _value(a) for a in chats[0].attributes}
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.request.model"] == model
    assert first["gen_ai.provider.name"] == tiny_client.backend and first["gen_ai.request.max_tokens"] == 96
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"] and "gen_ai.usage.cache_read.input_tokens" in first
    tool = {a.key: _value(a) for a in by_name["execute_tool calculator"].attributes}
    assert tool["gen_ai.tool.name"] == "calculator" and tool["gen_ai.tool.call.id"]
    assert tool["app.tool.status"] in ("ok", "failed") and tool["app.tool.result_chars"] > 0

    text = repr([list(span.attributes) for span in got])
    assert ("marmalade" in text) is capture  # the prompt's text only with content capture on
    answer = conversation.messages[-1]
    assert answer.trace_id == format(int.from_bytes(turn.trace_id, "big"), "032x")
    steps = timeline.steps(answer.trace_id)  # the app's own timeline: the same spans, from memory
    assert [step.name for step in steps][0] == "invoke_agent composite-demo" and len(steps) == 4
    assert steps[0].depth == 0 and all(step.depth == 1 for step in steps[1:])
    assert all(step.start_s >= 0 and step.duration_s >= 0 for step in steps)
    assert "marmalade" not in repr([step.attributes for step in steps])  # the timeline keeps no captured text


def test_an_approved_mcp_call_shows_its_wait_and_its_request_to_the_server(tiny_client, tmp_path):
    manager = McpManager(McpSettings(config_path=str(write_config(tmp_path, {"demo": {
        "command": sys.executable, "args": [str(SERVER), "stdio"]}})), connect_timeout_s=60))
    conversation = Conversation([Message("user", "Add two numbers")])
    params = GenerationParams(temperature=0.0, max_new_tokens=300)
    try:
        with collector() as (_, got):
            manager.refresh(manager.connections())
            registry = mcp_registry(manager, manager.connections(), taken=load_tools().names).subset(["add"])
            tools = ToolSettings(registry, choice="add", max_rounds=2, policies={"add": "ask"})
            asked = list(run_turn(tiny_client, conversation, params, tools=tools))
            assert [type(event).__name__ for event in asked][-2:] == ["ApprovalNeeded", "TurnDone"]
            (call,) = conversation.messages[-1].tool_calls
            assert call.asked_at is not None
            time.sleep(0.3)  # the person reads the card
            edited = {"a": 2, "b": 3}
            list(resume_turn(tiny_client, conversation, params, "", None, tools, None,
                             {call.id: Decision("run", arguments=edited)}))
    finally:
        manager.close()
    assert conversation.messages[2].content == "5"  # the server's answer to the edited call
    by_name = {span.name: span for span in got}
    execute, request = by_name["execute_tool add"], by_name["tools/call add"]
    tool = _attributes(execute)
    assert tool["app.tool.policy"] == "ask" and tool["app.tool.decision"] == "edited"
    assert 0.3 <= tool["app.tool.approval_wait_s"] < 60
    mcp = _attributes(request)
    assert request.parent_span_id == execute.span_id and request.trace_id == execute.trace_id
    assert mcp["mcp.method.name"] == "tools/call" and mcp["gen_ai.tool.name"] == "add"
    assert mcp["network.transport"] == "pipe" and mcp["app.mcp.server"] == "demo" and mcp["mcp.protocol.version"]
    assert "tools/list" in by_name  # the listing before the call: a request of its own
    turns = [span for span in got if span.name.startswith("invoke_agent")]
    assert len(turns) == 2 and execute.parent_span_id == turns[1].span_id  # paused, then resumed: two turns


def test_the_apps_mcp_server_traces_each_call_it_answers(tmp_path):
    """`python -m app.frontends.mcp` over stdio with the OTEL_* variables set: the SDK's middleware spans each call
    it answers (a SERVER span, `error.type` on a tool error), with the result's size the app adds."""
    from tests.api.test_mcp_server import stdio_server

    with otlp_receiver() as (collector, received):
        async def calls() -> None:
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "100",
                   "DEMO_SESSIONS_DIR": str(tmp_path / "sessions")}
            async with stdio_server(env, tmp_path / "server.log") as client:
                assert not (await client.call_tool("calculator", {"expression": "6 * 7"})).is_error
                assert (await client.call_tool("calculator", {"expression": "1 / 0"})).is_error
                deadline = time.monotonic() + 20
                while len(_calls(received)) < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)

        asyncio.run(calls())
        got = _calls(received)
    assert [span.name for span in got] == ["tools/call calculator"] * 2, (tmp_path / "server.log").read_text()
    right, wrong = (_attributes(span) for span in got)
    assert all(span.kind == span.SPAN_KIND_SERVER for span in got)
    assert right["mcp.method.name"] == "tools/call" and right["gen_ai.tool.name"] == "calculator"
    assert right["app.tool.result_chars"] == len("6 * 7 = 42") and "error.type" not in right
    assert wrong["error.type"] == "tool_error"


def _calls(received: list[Any]) -> list[Any]:
    return [span for request in received for resource in request.resource_spans for scope in resource.scope_spans
            for span in scope.spans if span.name.startswith("tools/call")]
