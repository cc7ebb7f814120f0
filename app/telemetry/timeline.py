"""The app's own view of its traces: the finished spans of the latest traces, kept in memory (a bounded number),
for the timeline under an answer. No collector is needed; nothing leaves the process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

MAX_TRACES = 500
MAX_SPANS_PER_TRACE = 200  # a long agent loop's trace keeps the first 200 spans to end, and its root


@dataclass(frozen=True)
class Step:
    """One span of a trace, placed in time from the trace's first span."""

    name: str
    start_s: float
    duration_s: float
    depth: int
    status: str  # "ok" or "error"
    attributes: dict[str, Any]


_CONTENT = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
            "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}  # large, and not drawn: not kept here


@dataclass(frozen=True)
class _Kept:
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    end_ns: int
    error: bool
    attributes: dict[str, Any]


class TimelineProcessor(SpanProcessor):
    """Keeps what a timeline draws of each finished span (no captured text), for the latest `max_traces` traces,
    at most MAX_SPANS_PER_TRACE spans each."""

    def __init__(self, max_traces: int = MAX_TRACES) -> None:
        self._spans: OrderedDict[int, list[_Kept]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_traces

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None:
            return
        start = span.start_time or 0
        kept = _Kept(span.context.span_id, span.parent.span_id if span.parent else None, span.name, start,
                     span.end_time or start, span.status.status_code.name == "ERROR",
                     {key: value for key, value in (span.attributes or {}).items() if key not in _CONTENT})
        with self._lock:
            spans = self._spans.setdefault(span.context.trace_id, [])
            if len(spans) < MAX_SPANS_PER_TRACE or kept.parent_id is None:  # the turn's own span always
                spans.append(kept)
            self._spans.move_to_end(span.context.trace_id)
            while len(self._spans) > self._max:
                self._spans.popitem(last=False)

    def steps(self, trace_id: str) -> list[Step]:
        """The trace's spans (a hex trace id), parents before children, in start order; [] when not kept."""
        try:
            key = int(trace_id, 16)
        except ValueError:
            return []
        with self._lock:
            spans = list(self._spans.get(key, []))
        if not spans:
            return []
        first = min(span.start_ns for span in spans)
        parents = {span.span_id: span.parent_id for span in spans}

        def depth(span_id: int | None) -> int:
            level = 0
            while span_id is not None and parents.get(span_id) is not None and level < MAX_SPANS_PER_TRACE:
                span_id, level = parents[span_id], level + 1
            return level

        return [Step(span.name, (span.start_ns - first) / 1e9, (span.end_ns - span.start_ns) / 1e9,
                     depth(span.span_id), "error" if span.error else "ok", span.attributes)
                for span in sorted(spans, key=lambda span: span.start_ns)]


TIMELINES = TimelineProcessor()
