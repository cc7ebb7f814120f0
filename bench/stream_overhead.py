"""What does the HF client's streaming cost over a bare `model.generate`?

Same model, same prompt, greedy, exactly N new tokens (EOS ignored) for both. For each run we record when the
consumer receives the first and the last token,
both on the client's one generation thread, and report decode speed ((N-1) / (last - first)) and time to
first token, median of several alternating runs. Targets: tok/s ratio >= 0.97, TTFT added <= 50 ms.

    .venv/bin/python -m bench.stream_overhead [--model PATH] [--tokens 256] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers.generation.streamers import BaseStreamer

from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from bench.timing import time_client_stream

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


class Clock(BaseStreamer):
    """The thinnest possible observer of generate(): a timestamp per token, nothing else."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.count = 0
        self._prompt = True

    def put(self, value) -> None:
        if self._prompt:
            self._prompt = False
            return
        self.times.append(time.perf_counter())
        self.count += value.numel()

    def end(self) -> None:
        pass


def raw_run(client: HFClient, tokens: int) -> tuple[float, float]:
    # On the client's own generation thread, so both sides run torch on the same OS thread (torch's CPU kernels
    # keep per-thread OpenMP state; mixing threads would measure that, not the streaming path).
    return client.queue.submit(_raw_generate, client, tokens).result()


def _raw_generate(client: HFClient, tokens: int) -> tuple[float, float]:
    input_ids = torch.tensor([client.template.render(PROMPT).token_ids])
    clock = Clock()
    started = time.perf_counter()
    with torch.inference_mode():
        client.model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=tokens,
            min_new_tokens=tokens, do_sample=False, temperature=None, top_p=None, top_k=None,
            pad_token_id=client.stop_token_ids[0], eos_token_id=client.stop_token_ids, streamer=clock,
        )
    assert clock.count == tokens, clock.count
    return (tokens - 1) / (clock.times[-1] - clock.times[0]), clock.times[0] - started


def client_run(client: HFClient, tokens: int) -> tuple[float, float]:
    sample = time_client_stream(client, PROMPT, tokens)
    assert sample.tokens == tokens, sample
    return sample.decode_tps, sample.ttft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    # The generate() path (answers one after another), which the raw run calls too; bench/concurrency.py compares
    # it with continuous batching.
    client = HFClient(ModelSettings(model_path=args.model, hf_max_batch=1))
    print(f"model: {client.describe()}; {args.tokens} new tokens, EOS ignored, {args.runs} runs each, "
          f"torch threads {torch.get_num_threads()}")
    raw_run(client, 16), client_run(client, 16)  # warm-up: first-call allocations and kernel selection
    raw, ours = [], []
    for _ in range(args.runs):  # alternate, so drift in machine load hits both sides alike
        raw.append(raw_run(client, args.tokens))
        ours.append(client_run(client, args.tokens))
    raw_tps = statistics.median(r[0] for r in raw)
    our_tps = statistics.median(r[0] for r in ours)
    raw_ttft = statistics.median(r[1] for r in raw)
    our_ttft = statistics.median(r[1] for r in ours)
    print(f"raw model.generate : {raw_tps:7.2f} tok/s   TTFT {raw_ttft * 1000:7.1f} ms")
    print(f"HF client stream   : {our_tps:7.2f} tok/s   TTFT {our_ttft * 1000:7.1f} ms")
    print(f"tok/s ratio (client / raw): {our_tps / raw_tps:.3f}   (target >= 0.97)")
    print(f"TTFT added by the client : {(our_ttft - raw_ttft) * 1000:+.1f} ms   (target <= 50 ms)")


if __name__ == "__main__":
    main()
