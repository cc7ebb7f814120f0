"""The process's tracer provider, set once: always an SDK provider (in the Streamlit app, the answers' timelines
read its spans from memory, timeline.py), exporting over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, with every other standard OTEL_* variable (headers, service name,
sampler...) read by the SDK itself. OTEL_SDK_DISABLED=true turns tracing off altogether."""

from __future__ import annotations

import os
import threading

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from app.telemetry.timeline import TIMELINES

SERVICE = "composite-demo"
_lock = threading.Lock()
_configured = False
_timelines = False  # TIMELINES added to the provider


def exporting() -> bool:
    """Whether spans leave the process: an OTLP endpoint is configured."""
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure_tracing(timelines: bool = False) -> None:
    """Once per process (the app, the API server, the MCP server, `make eval`): the provider and, when configured,
    the OTLP exporter; `timelines`: also keep the latest traces in memory for the answers' timelines (the app's
    own process only: nobody reads them elsewhere)."""
    global _configured, _timelines
    with _lock:
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            _configured = True
            return
        if not _configured:
            service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE
            provider = TracerProvider(resource=Resource.create({"service.name": service}))
            if exporting():
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
            _configured = True
        # Also when the provider was set up first without them (one process serving the app and another front end,
        # as the tests do).
        current = trace.get_tracer_provider()
        if timelines and not _timelines and isinstance(current, TracerProvider):
            current.add_span_processor(TIMELINES)
            _timelines = True


def flush(timeout_ms: int = 5000) -> None:
    """Send what is batched (before a process ends, and in tests)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(timeout_ms)
