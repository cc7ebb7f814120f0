"""The API server's traces, as an operator turns them on: `python -m app.frontends.api` started with the standard
OTEL_* variables sends each request's spans over OTLP/HTTP to a receiver on 127.0.0.1 (a collector's stand-in
speaking its protocol). A chat completion is the FastAPI instrumentation's server span with the model call as
its child, named and described as the GenAI conventions say; a legacy completion is a `text_completion`. No
prompt text is in any span while content capture is off."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from harness.local_http import free_port
from harness.processes import server_process
from tests.engines.test_traces import _attributes, otlp_receiver
from tests.helpers import ARTIFACTS, ROOT


def _spans(received: list[Any]) -> list[Any]:
    return [span for request in received for resource in request.resource_spans for scope in resource.scope_spans
            for span in scope.spans]


def _wait_for(received: list[Any], names: set[str], timeout_s: float = 20) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = _spans(received)
        if names <= {span.name for span in got}:
            return got
        time.sleep(0.1)
    raise AssertionError(f"spans received: {sorted({span.name for span in _spans(received)})}")


def test_each_request_is_traced_to_the_collector_the_otel_variables_name(tiny_model_dir: Path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with otlp_receiver() as (collector, received):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEMO_DEVICE": "cpu", "OTEL_EXPORTER_OTLP_ENDPOINT": collector,
               "OTEL_SERVICE_NAME": "my-demo", "OTEL_BSP_SCHEDULE_DELAY": "100"}
        env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
        command = [sys.executable, "-m", "app.frontends.api", "--model", str(tiny_model_dir), "--served-model-name",
                   "tiny", "--port", str(port)]
        with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=ARTIFACTS / "api-server-traces.log",
                            start_timeout_s=120, lifetime_s=300):
            reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
                "model": "tiny", "max_tokens": 5, "temperature": 0,
                "messages": [{"role": "user", "content": "Secret word: marmalade"}]})
            assert reply.status_code == 200, reply.text
            assert httpx.post(f"{base}/v1/completions", timeout=60, json={
                "model": "tiny", "prompt": "Marmalade is", "max_tokens": 3}).status_code == 200
            got = _wait_for(received, {"POST /v1/chat/completions", "chat tiny", "text_completion tiny"})
    by_name = {span.name: span for span in got}
    server, chat = by_name["POST /v1/chat/completions"], by_name["chat tiny"]
    assert server.kind == server.SPAN_KIND_SERVER and chat.kind == chat.SPAN_KIND_CLIENT
    assert chat.parent_span_id == server.span_id and chat.trace_id == server.trace_id
    attributes = _attributes(chat)
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "tiny"
    assert attributes["gen_ai.usage.output_tokens"] == 5 and attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.response.finish_reasons"] == ["length"] and attributes["gen_ai.request.max_tokens"] == 5
    assert _attributes(by_name["text_completion tiny"])["gen_ai.operation.name"] == "text_completion"
    services = {_attributes(resource.resource)["service.name"] for request in received
                for resource in request.resource_spans}
    assert services == {"my-demo"}
    assert "marmalade" not in repr(got).lower()  # content capture is off
