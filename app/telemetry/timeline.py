"""The app's own view of its traces: the finished spans of the latest traces, kept in memory (a bounded number),
for the timeline under an answer. No collector is needed; nothing leaves the process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

MAX_TRACES = 500


@dataclass(frozen=True)
class Step:
    """One span of a trace, placed in time from the trace's first span."""

    name: str
    start_s: float
    duration_s: float
    depth: int
    status: str  # "ok" or "error"
    attributes: dict[str, Any]


class TimelineProcessor(SpanProcessor):
    def __init__(self, max_traces: int = MAX_TRACES) -> None:
        self._spans: OrderedDict[int, list[ReadableSpan]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_traces

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None:
            return
        with self._lock:
            self._spans.setdefault(span.context.trace_id, []).append(span)
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
        first = min(span.start_time or 0 for span in spans)
        parents = {span.context.span_id: (span.parent.span_id if span.parent else None)
                   for span in spans if span.context is not None}

        def depth(span_id: int | None) -> int:
            level = 0
            while span_id is not None and parents.get(span_id) is not None:
                span_id, level = parents[span_id], level + 1
            return level

        ordered = sorted(spans, key=lambda span: (span.start_time or 0))
        return [Step(span.name, ((span.start_time or first) - first) / 1e9,
                     ((span.end_time or span.start_time or 0) - (span.start_time or 0)) / 1e9,
                     depth(span.context.span_id if span.context else None),
                     "error" if span.status.status_code.name == "ERROR" else "ok", dict(span.attributes or {}))
                for span in ordered]


TIMELINES = TimelineProcessor()
