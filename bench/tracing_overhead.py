"""What does tracing cost a turn? The same tool-loop turn (the calculator call forced, then the answer), on the
same model, with tracing off (OpenTelemetry's no-op provider) and on as the app runs it (the SDK's provider, the
in-memory timelines and a batching exporter, whose export runs on its own thread), alternating, greedy. Reports
the median turn time of each, their ratio and the spans a turn makes. Target: ratio (off / on) >= 0.98.

    .venv/bin/python -m bench.tracing_overhead [--model PATH] [--runs 15] [--tokens 96]
"""

from __future__ import annotations

import argparse
import statistics
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

from app.agent.loop import ToolSettings, run_turn
from app.clients.client_protocol import GenerationParams
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from app.domain.conversation import Conversation, Message
from app.telemetry import spans
from app.telemetry.timeline import TimelineProcessor
from app.tools import load_tools


def turn(client: HFClient, tokens: int) -> float:
    conversation = Conversation([Message("user", "What is 12 * 9?")])
    tools = ToolSettings(load_tools().subset(["calculator"]), choice="calculator", max_rounds=2)
    started = time.perf_counter()
    for _ in run_turn(client, conversation, GenerationParams(temperature=0.0, max_new_tokens=tokens, seed=0),
                      tools=tools):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=96, help="new tokens at most, per model call")
    args = parser.parse_args()

    client = HFClient(ModelSettings(model_path=args.model))
    exported = InMemorySpanExporter()
    traced = TracerProvider()
    traced.add_span_processor(TimelineProcessor())
    traced.add_span_processor(BatchSpanProcessor(exported))
    print(f"model: {client.describe()}; a forced calculator call and its answer, {args.runs} turns each way")
    turn(client, args.tokens)  # warm-up: first-call allocations, kernel selection, the grammar's compilation
    off, on = [], []
    try:
        for _ in range(args.runs):  # alternate, so drift in machine load hits both sides alike
            spans.use_provider(NoOpTracerProvider())
            off.append(turn(client, args.tokens))
            spans.use_provider(traced)
            on.append(turn(client, args.tokens))
    finally:
        spans.use_provider(None)
        traced.force_flush()
        traced.shutdown()
        client.close()
    per_turn = len(exported.get_finished_spans()) / args.runs
    off_s, on_s = statistics.median(off), statistics.median(on)
    print(f"tracing off : {off_s * 1000:8.1f} ms a turn (median)")
    print(f"tracing on  : {on_s * 1000:8.1f} ms a turn (median), {per_turn:.0f} spans a turn")
    print(f"ratio (off / on): {off_s / on_s:.3f}   (target >= 0.98)")


if __name__ == "__main__":
    main()
