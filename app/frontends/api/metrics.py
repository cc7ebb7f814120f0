"""The API server's Prometheus metrics (GET /metrics): requests, tokens, time to first token, latency, errors.

Each app has its own registry, so two servers in one process (tests) never share counts.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.clients.client_protocol import ModelActivity
from app.domain.conversation import AnswerMetrics

# Seconds: from tens of milliseconds (a warm GPU) to minutes (a long prompt on a laptop CPU).
_TIME_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("demo_http_requests", "HTTP requests answered, by route and status code.",
                                ["route", "status"], registry=self.registry)
        self.in_progress = Gauge("demo_chat_requests_in_progress",
                                 "Chat completions being generated now (a cancelled one until its generation stopped).",
                                 registry=self.registry)
        self.prompt_tokens = Counter("demo_prompt_tokens", "Prompt tokens processed.", registry=self.registry)
        self.completion_tokens = Counter("demo_completion_tokens", "Completion tokens generated.",
                                         registry=self.registry)
        self.cached_tokens = Counter("demo_prompt_cached_tokens",
                                     "Prompt tokens taken from the engine's prompt cache instead of being read.",
                                     registry=self.registry)
        self.prompt_cache = Counter("demo_prompt_cache_lookups",
                                    "Chat completions by whether the engine's prompt cache held part of their prompt.",
                                    ["result"], registry=self.registry)
        self.finished = Counter("demo_chat_completions", "Chat completions finished, by finish reason.",
                                ["finish_reason"], registry=self.registry)
        self.time_to_first_token = Histogram("demo_time_to_first_token_seconds",
                                             "Time from the request to the first generated token.",
                                             buckets=_TIME_BUCKETS, registry=self.registry)
        self.latency = Histogram("demo_chat_completion_duration_seconds",
                                 "Time from the request to the last token of a chat completion.",
                                 buckets=_TIME_BUCKETS, registry=self.registry)
        self.errors = Counter("demo_errors", "Requests that ended in an error, by kind.", ["kind"],
                              registry=self.registry)

    def watch_model(self, activity: Callable[[], ModelActivity | None]) -> None:
        """Gauges read from the model at each scrape: answers it writes together now, and answers that wait."""
        def reading(field: str) -> Callable[[], float]:
            def read() -> float:
                now = activity()
                return float(getattr(now, field)) if now is not None else float("nan")
            return read

        Gauge("demo_model_answers_generating", "Answers the model is writing now, together where it batches them.",
              registry=self.registry).set_function(reading("generating"))
        Gauge("demo_model_answers_waiting", "Answers waiting for room in the model's batch.",
              registry=self.registry).set_function(reading("waiting"))

    def record_answer(self, metrics: AnswerMetrics, finish_reason: str, duration_s: float) -> None:
        self.prompt_tokens.inc(metrics.prompt_tokens)
        self.completion_tokens.inc(metrics.completion_tokens)
        self.cached_tokens.inc(metrics.cached_tokens)
        self.prompt_cache.labels("hit" if metrics.cached_tokens else "miss").inc()
        self.finished.labels(finish_reason).inc()
        if metrics.time_to_first_token_s is not None:
            self.time_to_first_token.observe(metrics.time_to_first_token_s)
        self.latency.observe(duration_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
