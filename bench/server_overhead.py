"""What does going through our OpenAI-compatible server cost?

1. Our server (HF backend, embedded SmolLM2) vs the same client in process: streamed tok/s and TTFT, greedy,
   N new tokens, EOS ignored, median of alternating runs. Target: tok/s ratio >= 0.95.
2. With vLLM installed (--vllm): our server on the vLLM backend vs vLLM's own OpenAI server, same model and
   requests, both through the `openai` SDK.

    .venv/bin/python -m bench.server_overhead [--tokens 128] [--runs 5] [--vllm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from bench.timing import time_client_stream, time_server_stream

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def in_process(client, tokens: int) -> tuple[float, float]:
    sample = time_client_stream(client, PROMPT, tokens)
    return sample.decode_tps, sample.ttft


def over_http(sdk, model: str, tokens: int) -> tuple[float, float]:
    sample = time_server_stream(sdk, model, PROMPT, tokens, {"ignore_eos": True} if "vllm" in model else None)
    return sample.decode_tps, sample.ttft


def start_our_server(client, served_name: str = "bench") -> tuple[str, object]:
    import uvicorn

    from app.config import ServerSettings
    from app.frontends.api.server_app import create_app
    from harness.local_http import free_port

    port = free_port()
    app = create_app(ServerSettings(served_name=served_name), client=client)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server


def compare(label_a: str, run_a, label_b: str, run_b, runs: int) -> None:
    run_a(), run_b()  # warm-up
    a, b = [], []
    for _ in range(runs):
        a.append(run_a())
        b.append(run_b())
    a_tps, b_tps = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    a_ttft, b_ttft = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    print(f"{label_a:28s}: {a_tps:8.2f} tok/s   TTFT {a_ttft * 1000:7.1f} ms")
    print(f"{label_b:28s}: {b_tps:8.2f} tok/s   TTFT {b_ttft * 1000:7.1f} ms")
    print(f"tok/s ratio ({label_b} / {label_a}): {b_tps / a_tps:.3f}   (target >= 0.95); "
          f"TTFT added: {(b_ttft - a_ttft) * 1000:+.1f} ms")


class IgnoreEOSClient:
    """The in-process client with EOS ignored on every request, so both sides generate exactly N tokens."""

    def __init__(self, client) -> None:
        self.client = client
        self.backend = client.backend

    def __getattr__(self, name):
        return getattr(self.client, name)

    def stream(self, messages, params, cancel, tools=None, response_format=None):
        from dataclasses import replace

        return self.client.stream(messages, replace(params, ignore_eos=True), cancel, tools, response_format)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vllm", action="store_true", help="also compare with vLLM's own OpenAI server")
    args = parser.parse_args()

    import openai

    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    client = HFClient(ModelSettings())
    base, server = start_our_server(IgnoreEOSClient(client))
    sdk = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    print(f"model: {client.describe()}; {args.tokens} new tokens, EOS ignored, median of {args.runs}")
    compare("in-process HF client", lambda: in_process(client, args.tokens),
            "our server (HF)", lambda: over_http(sdk, "bench", args.tokens), args.runs)
    server.should_exit = True
    client.close()
    if args.vllm:
        compare_vllm(args)


def compare_vllm(args) -> None:
    import openai

    from app.clients.embedded_model import ensure_embedded_model
    from app.clients.vllm import VLLMClient
    from app.config import ModelSettings
    from harness.local_http import free_port

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = str(ensure_embedded_model())
    ours_client = VLLMClient(ModelSettings(backend="vllm", model_path=model, max_context_tokens=4096))
    base, server = start_our_server(IgnoreEOSClient(ours_client))
    port = free_port()
    theirs = subprocess.Popen(
        ["timeout", "900", sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
         "--served-model-name", "vllm-own", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
         "--gpu-memory-utilization", "0.3"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except OSError:
            time.sleep(1)
    ours = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    own = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    compare("vLLM's own OpenAI server", lambda: over_http(own, "vllm-own", args.tokens),
            "our server (vLLM backend)", lambda: over_http(ours, "bench", args.tokens), args.runs)
    theirs.terminate()
    server.should_exit = True
    ours_client.close()


if __name__ == "__main__":
    main()
