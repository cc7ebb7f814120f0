"""Our server against what a local-model user would run instead, on the same model, in one run: llama.cpp's own
`llama-server` and raw `llama-cpp-python` on the embedded SmolLM2 GGUF, and our server on its llama.cpp backend
(that GGUF) and on its transformers backend (the same model converted, in its default precision and in bfloat16).

Each is asked the same things, greedy, through its OpenAI API (raw llama-cpp-python in process, on the token ids
the GGUF's chat template gives):
- decode: tok/s of one streamed answer of N new tokens (EOS ignored), and its time to first token;
- conversation: time to first token of a 25-message conversation (about 1,800 tokens) sent the first time, then of
  the same conversation one turn later (its answer and a new question added). Every run starts the conversation
  with new words, so nothing of it is cached before its first request;
- tools: time to first token (text or tool call) of a Tools-page turn with 10 tools on offer, then of the tool loop's
  next step (a call and its result added).
Medians of --runs. The ratios the targets are set on come last.

    make llama-server          # builds llama.cpp's server from the source llama-cpp-python's sdist carries
    .venv/bin/python -m bench.peer_speed [--llama-server PATH] [--threads N] [--tokens 128] [--runs 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LLAMA_SERVER = ROOT / ".venv" / "llama-server" / "build" / "bin" / "llama-server"  # make llama-server
CONTEXT = 4096
FILLER = ("The harbour town keeps its old stone lighthouse, a market of fish and bread every morning, boats painted "
          "blue and white, and a long quay where children watch the ferries. ")


def conversation(nonce: int) -> list[dict[str, Any]]:
    """25 messages, about 1,800 tokens; its first words are new on every run."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"Session {nonce}. You are a travel guide."}]
    for i in range(12):
        messages.append({"role": "user", "content": f"Question {i} ({nonce}): tell me about the harbour. " + FILLER})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + FILLER * 2})
    messages.append({"role": "user", "content": "What should I see first?"})
    return messages


def tool_schemas() -> list[dict[str, Any]]:
    """The app's own tools, and more of their kind up to 10: what the Tools page offers a model."""
    from app.tools import load_tools

    schemas = load_tools().schemas()
    extra = ["search_flights", "book_table", "translate_text", "get_stock_price", "send_email", "find_recipe"]
    for name in extra[: max(0, 10 - len(schemas))]:
        schemas.append({"type": "function", "function": {
            "name": name, "description": f"{name.replace('_', ' ').capitalize()} for the user.",
            "parameters": {"type": "object", "required": ["query"],
                           "properties": {"query": {"type": "string", "description": "What to look for."},
                                          "limit": {"type": "integer", "description": "How many results."}}}}})
    return schemas[:10]


def tool_turn(nonce: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"Session {nonce}. Use the tools when they help."},
            {"role": "user", "content": "What is the weather in Paris right now?"}]


def tool_step(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool loop's next request: a call of get_weather and its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    return [*messages, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Paris", "temperature_c": 18}'}]


@dataclass
class Timing:
    ttft: float
    tokens: int
    decode_tps: float


Ask = Callable[[list[dict[str, Any]], int, list[dict[str, Any]] | None, bool], Timing]


def over_openai_api(base_url: str, model: str, extra: dict[str, Any] | None = None) -> Ask:
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=600)

    def ask(messages, max_tokens, tools, ignore_eos) -> Timing:
        sent = time.perf_counter()
        first = last = None
        tokens = 0
        offered = {"tools": tools} if tools else {}
        body = {**(extra or {}), **({"ignore_eos": True} if ignore_eos else {})}
        for chunk in sdk.chat.completions.create(
                model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
                stream_options={"include_usage": True}, extra_body=body or None, **offered):
            if chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].delta.tool_calls):
                last = time.perf_counter()
                first = first or last
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        assert first is not None and last is not None, "no token came back"
        return Timing(first - sent, tokens, (tokens - 1) / (last - first) if last > first else float("nan"))

    return ask


def raw_binding(gguf: Path, threads: int) -> tuple[Ask, Callable[[], None]]:
    """llama-cpp-python's Llama.generate on the token ids of the GGUF's own chat template: no server, no parser."""
    import llama_cpp
    from transformers import AutoTokenizer

    llama = llama_cpp.Llama(model_path=str(gguf), n_ctx=CONTEXT, n_threads=threads, n_threads_batch=threads,
                            verbose=False)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    eos = llama.token_eos()

    def ask(messages, max_tokens, tools, ignore_eos) -> Timing:
        sent = time.perf_counter()
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        first = last = None
        count = 0
        for token in llama.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if token == eos and not ignore_eos:
                break
            llama.detokenize([token])
            last = time.perf_counter()
            first = first or last
            count += 1
            if count >= max_tokens:
                break
        assert first is not None and last is not None
        return Timing(first - sent, count, (count - 1) / (last - first) if last > first else float("nan"))

    return ask, llama.close


def start_llama_server(binary: Path, gguf: Path, threads: int) -> tuple[Ask, Callable[[], None]]:
    from harness.local_http import free_port

    port = free_port()
    process = subprocess.Popen(
        [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", str(CONTEXT),
         "-t", str(threads), "-tb", str(threads), "--jinja", "--no-webui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_healthy(f"http://127.0.0.1:{port}/health", process)
    return over_openai_api(f"http://127.0.0.1:{port}/v1", "smollm2"), process.terminate


def our_server(backend: str, threads: int) -> tuple[Ask, Callable[[], None], str]:
    """Our server (`python -m app.frontends.api`, a process of its own, as `make serve` runs it) on `backend`: "" (none
    named: the default engine here, what `make serve` starts), "llamacpp", "hf" (its default precision, float32 on
    a CPU) or "hf-bfloat16"."""
    from app.clients.choice import default_backend
    from harness.local_http import free_port

    port = free_port()
    engine, _, dtype = backend.partition("-")
    env = {key: value for key, value in os.environ.items() if key not in ("DEMO_BACKEND", "DEMO_MODEL")}
    env.update({"DEMO_MAX_CONTEXT": str(CONTEXT), "DEMO_LLAMACPP_THREADS": str(threads), "DEMO_DTYPE": dtype or "auto"})
    named = ["--backend", engine] if engine else []
    process = subprocess.Popen([sys.executable, "-m", "app.frontends.api", *named, "--port", str(port),
                                "--served-model-name", "bench"], env=env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until_healthy(f"http://127.0.0.1:{port}/health", process)
    engine = engine or f"default: {default_backend('')}"
    described = f"{engine}, {dtype or 'default precision'}" if engine == "hf" else f"{engine}, {threads} threads"
    # The same work as the peers: no repetition penalty (ours would take the model's default, 1.1 for SmolLM2).
    return over_openai_api(f"http://127.0.0.1:{port}/v1", "bench", {"repetition_penalty": 1.0}), process.terminate, \
        described


def wait_until_healthy(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if json.loads(response.read()).get("status", "ok") == "ok":
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server behind {url} did not start")
        time.sleep(0.5)


@dataclass
class Figures:
    decode_tps: list[float] = field(default_factory=list)
    decode_ttft: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    follow_up: list[float] = field(default_factory=list)
    tools_first: list[float] = field(default_factory=list)
    tools_step: list[float] = field(default_factory=list)

    def median(self, name: str) -> float:
        values = getattr(self, name)
        return statistics.median(values) if values else float("nan")


DECODE_PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def measure(ask: Ask, runs: int, tokens: int, nonce_base: int, with_tools: bool) -> Figures:
    figures = Figures()
    ask([{"role": "user", "content": "Hello"}], 8, None, True)  # warm-up
    for run in range(runs):
        decode = ask(DECODE_PROMPT, tokens, None, True)
        figures.decode_tps.append(decode.decode_tps)
        figures.decode_ttft.append(decode.ttft)
        messages = conversation(nonce_base + run)
        figures.first.append(ask(messages, 32, None, False).ttft)
        follow = [*copy.deepcopy(messages), {"role": "assistant", "content": "See the lighthouse first."},
                  {"role": "user", "content": "And after that?"}]
        figures.follow_up.append(ask(follow, 32, None, False).ttft)
        if with_tools:
            turn = tool_turn(nonce_base + run)
            figures.tools_first.append(ask(turn, 48, tool_schemas(), False).ttft)
            figures.tools_step.append(ask(tool_step(turn), 48, tool_schemas(), False).ttft)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, default=Path(os.environ.get("LLAMA_SERVER", DEFAULT_LLAMA_SERVER)))
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for every llama.cpp (0: our default)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=["llama-server", "raw", "ours", "ours-hf"],
                        help="llama-server, raw, ours (no backend named: make serve's default), ours-llamacpp, "
                             "ours-hf, ours-hf-bfloat16")
    args = parser.parse_args()

    from app.clients.embedded_model import gguf_path
    from app.clients.llamacpp.llamacpp_client import default_threads

    threads = args.threads or default_threads()
    gguf = gguf_path()
    print(f"model: {gguf.name}; {threads} threads for llama.cpp; {args.tokens} new tokens for decode; "
          f"median of {args.runs} runs")
    results: dict[str, Figures] = {}
    labels: dict[str, str] = {}
    for index, name in enumerate(args.only):
        nonce = 1000 * (index + 1) + int(time.time()) % 1000
        if name == "llama-server":
            if not args.llama_server.is_file():
                print(f"llama-server: not found at {args.llama_server} (make llama-server builds it); skipped")
                continue
            ask, stop = start_llama_server(args.llama_server, gguf, threads)
            labels[name] = "llama-server (llama.cpp's own)"
        elif name == "raw":
            ask, stop = raw_binding(gguf, threads)
            labels[name] = "raw llama-cpp-python"
        else:
            ask, stop, description = our_server(name.removeprefix("ours").removeprefix("-"), threads)
            labels[name] = f"our server: {description}"
        try:
            results[name] = measure(ask, args.runs, args.tokens, nonce, with_tools=name != "raw")
        finally:
            stop()
        report(labels[name], results[name])
    compare(results)


def report(label: str, figures: Figures) -> None:
    print(f"\n{label}")
    print(f"  decode {figures.median('decode_tps'):7.1f} tok/s (TTFT {figures.median('decode_ttft') * 1000:6.0f} ms)"
          f" · 25-message conversation TTFT: first {figures.median('first'):6.2f} s, follow-up "
          f"{figures.median('follow_up'):6.2f} s")
    if figures.tools_first:
        print(f"  Tools turn, 10 tools: TTFT {figures.median('tools_first'):6.2f} s, next step "
              f"{figures.median('tools_step'):6.2f} s")


# (what, ours, of, the figure, the other figure, the target): issue 37's, for `make serve` with no backend named
RATIOS = [
    ("default decode / llama-server", "ours", "llama-server", "decode_tps", None, ">= 0.95"),
    ("default decode / raw llama-cpp-python", "ours", "raw", "decode_tps", None, ""),
    ("default first TTFT / llama-server", "ours", "llama-server", "first", None, "<= 1.2"),
    ("default first TTFT / transformers (the old default)", "ours", "ours-hf", "first", None, "<= 1.0"),
    ("default follow-up TTFT / llama-server", "ours", "llama-server", "follow_up", None, "<= 1.5"),
    ("default follow-up / its first TTFT", "ours", "ours", "follow_up", "first", ""),
    ("default Tools first turn / transformers'", "ours", "ours-hf", "tools_first", None, "<= 1.0"),
    ("default Tools next step / transformers'", "ours", "ours-hf", "tools_step", None, ""),
    ("transformers decode / llama-server", "ours-hf", "llama-server", "decode_tps", None, ""),
    ("transformers decode, bfloat16 / float32", "ours-hf-bfloat16", "ours-hf", "decode_tps", None, ""),
]


def compare(results: dict[str, Figures]) -> None:
    print("\nratios (targets from issue 37)")
    for label, ours, of, figure, other, target in RATIOS:
        value = "n/a"
        if ours in results and of in results:
            value = f"{results[ours].median(figure) / results[of].median(other or figure):.2f}"
        print(f"  {label:50s} {value:>6s}   {target}")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
