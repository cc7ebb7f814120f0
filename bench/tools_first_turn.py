"""The Tools page's first turn, as the page runs it, on the default engine (llama.cpp on a CPU) and on transformers,
in one run: time to the first token of a model that has just loaded, with the page's tool set on offer (the app's
own tools and more of their kind, 10 in all) and the page's system prompt (empty by default).

The llama.cpp runner reads the tools' schemas when the page loads (`app.agent.loop.warm_turn`), while the user types:
the figure is taken `--typing` seconds after the page loaded (default 10: reading a question and typing one), and
also at once (0 s), where the first turn waits for what the warm-up has not read yet. transformers reads the whole
prompt with its first turn either way.

    .venv/bin/python -m bench.tools_first_turn [--runs 3] [--typing 10]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from app.clients.backends import create_client
from app.clients.client_protocol import Client, GenerationParams, PromptWarming, ToolRequest
from app.config import ModelSettings
from bench.peer_speed import tool_schemas

QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]
PARAMS = GenerationParams(temperature=0.0, max_new_tokens=16, repetition_penalty=1.0)


def first_turn_ttft(backend: str, typing_s: float) -> float:
    client: Client = create_client(ModelSettings(backend=backend, max_context_tokens=4096))
    try:
        tools = ToolRequest(tuple(tool_schemas()))
        if isinstance(client, PromptWarming):  # what the page does when it loads (app.agent.loop.warm_turn)
            client.warm([], PARAMS, tools)
        time.sleep(typing_s)
        started = time.perf_counter()
        for delta in client.stream(QUESTION, PARAMS, threading.Event(), tools):
            if delta.text or delta.call_fragments:
                return time.perf_counter() - started
        return time.perf_counter() - started
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--typing", type=float, default=10.0)
    args = parser.parse_args()
    results: dict[str, float] = {}
    for backend, typing_s in (("llamacpp", args.typing), ("llamacpp", 0.0), ("hf", args.typing)):
        label = f"{backend}, first message {typing_s:g} s after the page loaded"
        results[label] = statistics.median(first_turn_ttft(backend, typing_s) for _ in range(args.runs))
        print(f"{label:55s} TTFT {results[label]:.2f} s", flush=True)
    llamacpp, at_once, hf = results.values()
    print(f"\nllama.cpp (warmed) / transformers: {llamacpp / hf:.2f}   (target <= 1.0)")
    print(f"llama.cpp (message at once) / transformers: {at_once / hf:.2f}")


if __name__ == "__main__":
    main()
