"""Fair share of the engine: another client's time to first token while one /v1/completions request with many
prompts is in flight, with each request's share bounded (DEMO_SERVER_PROMPTS_AT_ONCE, 4 by default) against
unbounded (every prompt started at once, as the server did before), on a tiny random model (real tokenizer, HF
continuous batching) served on 127.0.0.1.

For each mode: the other client's TTFT alone, then with the bulk request in flight, and the server's thread count
at its peak; then the ratios.

    .venv/bin/python -m bench.fair_share [--prompts 400] [--tokens 16] [--share 4]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path


def other_ttft(sdk, model: str) -> float:
    """Seconds to the first text of a streamed one-prompt completion."""
    started = time.perf_counter()
    with sdk.completions.create(model=model, prompt="Another client asks", max_tokens=8, stream=True,
                                extra_body={"ignore_eos": True}) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                return time.perf_counter() - started
    return time.perf_counter() - started


def run(client, share: int, prompts: int, tokens: int) -> tuple[float, float, int]:
    """(TTFT alone, TTFT with the bulk in flight, peak threads) with `share` prompts of a request at a time."""
    import openai

    from app.config import RequestLimits, ServerSettings
    from app.frontends.api.server_app import create_app
    from harness.local_http import serving

    settings = ServerSettings(limits=RequestLimits(prompts_at_once=share), max_generations=max(64, share))
    model = client.capabilities.model_id
    with serving(create_app(settings, client=client)) as base:
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=900)
        other_ttft(sdk, model)  # warm up
        alone = other_ttft(sdk, model)
        peak = threading.active_count()
        bulk = threading.Thread(target=lambda: sdk.completions.create(
            model=model, prompt=[f"Prompt number {n} says" for n in range(prompts)], max_tokens=tokens,
            extra_body={"ignore_eos": True}))
        bulk.start()
        time.sleep(1.0)  # the bulk request is in the engine
        peak = max(peak, threading.active_count())
        loaded = other_ttft(sdk, model)
        peak = max(peak, threading.active_count())
        bulk.join()
    return alone, loaded, peak


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fair_share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=400, help="prompts in the bulk request (default: 400)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per prompt of the bulk (default: 16)")
    parser.add_argument("--share", type=int, default=4, help="prompts of one request at a time (default: 4)")
    args = parser.parse_args()

    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings, offline_by_default
    from tests.tiny_model import build_tiny_model

    offline_by_default()
    folder = build_tiny_model(Path(tempfile.mkdtemp(prefix="bench-fair-")) / "tiny")
    client = HFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu"))
    results = {}
    for name, share in (("unbounded", args.prompts), (f"share {args.share}", args.share)):
        results[name] = run(client, share, args.prompts, args.tokens)
        alone, loaded, peak = results[name]
        print(f"{name:>10}: other client's TTFT alone {alone:.3f} s, with {args.prompts} prompts in flight "
              f"{loaded:.3f} s ({loaded / alone:.1f}x), peak threads {peak}", flush=True)
    unbounded, bounded = results["unbounded"], results[f"share {args.share}"]
    print(f"TTFT under load, unbounded / bounded: {unbounded[1] / bounded[1]:.1f}x; "
          f"peak threads {unbounded[2]} -> {bounded[2]}")


if __name__ == "__main__":
    main()
