"""What the transformers backend's prompt cache saves, on any device: a long conversation's first request, the same
conversation one turn later with the cache and without it (DEMO_PROMPT_CACHE_MB=0), side by side in one run; whether
the greedy answers with and without the cache are the same; and decode speed for 1 and 8 sessions at once
(continuous batching) in the precision the backend loads by default, beside transformers' own generate() on the same
loaded model.

    .venv/bin/python -m bench.prompt_cache [--model PATH] [--device cpu|cuda] [--turns 12] [--runs 3]
    .venv/bin/python -m bench.prompt_cache --device cuda --shape qwen2.5-1.5b   # random weights, a real model's shape

--shape builds a model with random weights in a temporary folder (the tiny test tokenizer, a real model's layers):
speed only, for a machine that cannot download one; its answers are nonsense, but the same nonsense with and
without the cache is still a check.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SHAPES = {  # the dimensions of real models' networks
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, head_dim=64),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, head_dim=128),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, head_dim=128),
}
FILLER = ("The harbour town keeps its old stone lighthouse, a market of fish and bread every morning, boats painted "
          "blue and white, and a long quay where children watch the ferries. ")


def conversation(nonce: int, turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": f"Session {nonce}. You are a travel guide."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i} ({nonce}): tell me about the harbour. " + FILLER},
                     {"role": "assistant", "content": f"Answer {i}: " + FILLER * 2}]
    return [*messages, {"role": "user", "content": "What should I see first?"}]


def ask(client: Any, messages: list[dict[str, str]], tokens: int = 24) -> tuple[float, str, Any]:
    """Time to first token, the text, the metrics of one greedy answer."""
    from app.clients.client_protocol import GenerationParams

    sent = time.perf_counter()
    first = None
    text = ""
    last = None
    for delta in client.stream(messages, GenerationParams(temperature=0.0, max_new_tokens=tokens), threading.Event()):
        if delta.text and first is None:
            first = time.perf_counter()
        text += delta.text
        last = delta
    return (first or time.perf_counter()) - sent, text, last.metrics if last else None


def decode_speed(client: Any, sessions: int, tokens: int) -> float:
    """Aggregate tok/s of `sessions` answers of `tokens` tokens (EOS ignored) sent at once."""
    from app.clients.client_protocol import GenerationParams

    params = GenerationParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    counts = [0] * sessions

    def one(i: int) -> None:
        for delta in client.stream([{"role": "user", "content": f"Story {i} about a lighthouse."}], params,
                                   threading.Event()):
            counts[i] = delta.metrics.completion_tokens

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def generate_speed(client: Any, tokens: int) -> float:
    """tok/s of transformers' own `generate()` on the same loaded model, greedy, one answer: the peer that measures
    what the backend's own decode loop (batching, stop strings, streaming) costs per token."""
    import torch

    ids = client.template.render([{"role": "user", "content": "Story 0 about a lighthouse."}]).token_ids
    input_ids = torch.tensor([ids], device=client.model.device)
    started = time.perf_counter()
    with torch.inference_mode():
        out = client.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                    max_new_tokens=tokens, min_new_tokens=tokens)
    return (out.shape[1] - len(ids)) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="a local model folder (default: the embedded SmolLM2)")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this real model's shape instead")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--turns", type=int, default=12, help="user/assistant pairs before the question (12: 25 "
                                                              "messages, about 1,800 tokens)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per answer for decode speed")
    args = parser.parse_args()

    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    model = args.model
    if args.shape:
        from tests.tiny_model import build_tiny_model

        model = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="bench-shape-")), max_position_embeddings=32768,
                                     **SHAPES[args.shape]))
    settings = ModelSettings(model_path=model, device=args.device, dtype=args.dtype, max_context_tokens=16384)
    cached = HFClient(settings)
    uncached = HFClient(ModelSettings(**{**settings.__dict__, "prompt_cache_mb": 0}))
    print(f"{cached.describe()}\n")
    ask(cached, conversation(0, 1)), ask(uncached, conversation(0, 1))  # warm-up
    first, follow_cached, follow_uncached, same, prompt, reused = [], [], [], 0, 0, 0
    for run in range(args.runs):
        messages = conversation(1000 + run, args.turns)
        ttft, text, metrics = ask(cached, messages)
        first.append(ttft)
        follow = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": "And after that?"}]
        ttft, text_cached, metrics = ask(cached, follow)
        follow_cached.append(ttft)
        prompt, reused = metrics.prompt_tokens, metrics.cached_tokens
        ttft, text_uncached, _ = ask(uncached, follow)
        follow_uncached.append(ttft)
        same += text_cached == text_uncached
    median = statistics.median
    print(f"conversation of {prompt} tokens, follow-up with {reused} of them cached; TTFT, median of {args.runs}:")
    print(f"  first request          {median(first) * 1000:8.0f} ms")
    print(f"  follow-up, cache       {median(follow_cached) * 1000:8.0f} ms   "
          f"({median(follow_cached) / median(first):.2f}x the first request; target <= 0.25)")
    print(f"  follow-up, no cache    {median(follow_uncached) * 1000:8.0f} ms")
    print(f"  same greedy answer with and without the cache: {same} of {args.runs}")
    uncached.close()
    one = decode_speed(cached, 1, args.tokens)
    eight = decode_speed(cached, 8, args.tokens)
    generate_speed(cached, 8)  # warm-up
    peer = generate_speed(cached, args.tokens)
    print(f"decode, {args.tokens} tokens: 1 session {one:.1f} tok/s, 8 at once {eight:.1f} tok/s ({eight / one:.2f}x); "
          f"transformers generate(), 1 answer: {peer:.1f} tok/s (the backend at {one / peer:.2f}x of it)")
    cached.close()


if __name__ == "__main__":
    main()
