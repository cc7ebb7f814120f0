"""The app's in-memory timelines stay bounded: the latest traces only, and at most MAX_SPANS_PER_TRACE spans of a
trace (and its root) however long its agent loop ran."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from app.telemetry.timeline import MAX_SPANS_PER_TRACE, TimelineProcessor


def test_a_long_trace_and_many_traces_are_kept_bounded():
    timeline = TimelineProcessor(max_traces=3)
    provider = TracerProvider()
    provider.add_span_processor(timeline)
    tracer = provider.get_tracer("test")
    turn = tracer.start_span("invoke_agent composite-demo")
    for number in range(MAX_SPANS_PER_TRACE + 50):
        tracer.start_span(f"execute_tool t{number}", context=set_span_in_context(turn)).end()
    turn.end()
    first = format(turn.get_span_context().trace_id, "032x")
    steps = timeline.steps(first)
    assert len(steps) == MAX_SPANS_PER_TRACE + 1  # the first spans to end, and the turn's own, which ends last
    assert steps[0].name == "invoke_agent composite-demo" and steps[1].name == "execute_tool t0"
    assert steps[0].depth == 0 and steps[1].depth == 1
    others = []
    for _ in range(3):
        span = tracer.start_span("invoke_agent composite-demo")
        span.end()
        others.append(format(span.get_span_context().trace_id, "032x"))
    assert timeline.steps(first) == [] and all(len(timeline.steps(trace)) == 1 for trace in others)
    assert timeline.steps("not hex") == []
