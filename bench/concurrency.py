"""Many sessions on one HF model: continuous batching (DEMO_HF_MAX_BATCH=8) against the queue (=1, generate() one
answer after another), side by side, through the client in process and through our OpenAI-compatible server (openai
SDK), with 1, 2, 4 and 8 sessions at once.

Each mode runs in a process of its own (two models driven from one process slow each other down) and the modes
take turns level by level. Every request is greedy with exactly N new tokens (EOS ignored) and a prompt of its own.
Two arrival patterns:
- burst: every session sends at the same moment; gives aggregate tok/s (all tokens / wall time), per-session
  decode tok/s ((N-1) / (last token - first token), median) and TTFT p50/p95.
- spread: session i sends after i/n of one lone answer's time, as users who arrive independently; gives TTFT.
Targets (SmolLM2 on a 2-core CPU): aggregate with 4 sessions >= 2.5x one session, 8 >= 3.5x; one session >= 0.95x
the queue's; TTFT p95 with 8 spread sessions < 2x one session's TTFT.

    .venv/bin/python -m bench.concurrency [--model PATH] [--tokens 128] [--sessions 1 2 4 8] [--paths client server]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.server_overhead import IgnoreEOSClient, start_our_server
from bench.timing import Sample, time_client_stream, time_server_stream

TOPICS = ["a lighthouse keeper and a storm", "a robot who learns to paint", "two rival bakers in Paris",
          "a lost dog finding its way home", "the first city on Mars", "a dragon afraid of heights",
          "a detective in a floating city", "a violin that plays by itself"]


Stream = Callable[[list[dict[str, str]], int], Sample]


def client_stream(client) -> Stream:
    return lambda messages, tokens: time_client_stream(client, messages, tokens)


def server_stream(base_url: str) -> Stream:
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=600)
    return lambda messages, tokens: time_server_stream(sdk, "bench", messages, tokens)


def prompt(session: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long story about {TOPICS[session % len(TOPICS)]}."}]


def run_sessions(stream: Stream, sessions: int, tokens: int, spread_s: float = 0.0) -> tuple[list[Sample], float]:
    """`sessions` threads, one request each, session i sending after i/sessions of `spread_s`; the samples and the
    wall time from the first send to the last token."""
    samples: list[Sample] = []
    errors: list[BaseException] = []
    start = time.perf_counter()

    def session(i: int) -> None:
        time.sleep(max(0.0, start + spread_s * i / sessions - time.perf_counter()))
        try:
            samples.append(stream(prompt(i), tokens))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return samples, max(s.last for s in samples) - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Level:
    sessions: int
    aggregate: float
    per_session: float
    ttft_p50: float
    ttft_p95: float
    spread_p50: float
    spread_p95: float


def measure(stream: Stream, sessions: int, tokens: int, lone_answer_s: float) -> Level:
    """One level; a single session is measured three times (median), it is every ratio's denominator."""
    if sessions == 1:
        runs = [run_sessions(stream, 1, tokens) for _ in range(3)]
        aggregate = statistics.median(s[0].tokens / wall for s, wall in runs)
        ttft = statistics.median(s[0].ttft for s, _ in runs)
        decode = statistics.median(s[0].decode_tps for s, _ in runs)
        return Level(1, aggregate, decode, ttft, ttft, ttft, ttft)
    burst, wall = run_sessions(stream, sessions, tokens)
    ttfts = [s.ttft for s in burst]
    spread_ttfts = [s.ttft for s in run_sessions(stream, sessions, tokens, lone_answer_s)[0]]
    return Level(sessions, sum(s.tokens for s in burst) / wall, statistics.median(s.decode_tps for s in burst),
                 percentile(ttfts, 0.5), percentile(ttfts, 0.95), percentile(spread_ttfts, 0.5),
                 percentile(spread_ttfts, 0.95))


def worker(conn, model: str, max_batch: int, path: str) -> None:
    """One mode in a process of its own: two models driven from one process slow each other down (each generating
    thread gets its own OpenMP team, and the teams fight over the cores), which would blur the comparison."""
    from app.clients.hf.hf_client import HFClient
    from app.config import ModelSettings

    client = HFClient(ModelSettings(model_path=model, hf_max_batch=max_batch))
    server = None
    if path == "client":
        stream = client_stream(client)
    else:
        base, server = start_our_server(IgnoreEOSClient(client), served_name="bench")
        stream = server_stream(base)
    conn.send(client.describe())
    while True:
        command, *args = conn.recv()
        if command == "stop":
            break
        if command == "lone":
            stream(prompt(0), 8)  # warm-up
            sample = stream(prompt(0), args[0])
            conn.send(sample.last - sample.sent)
        elif command == "measure":
            conn.send(measure(stream, *args))
    if server is not None:
        server.should_exit = True
    client.close()


def report(path: str, results: dict[str, list[Level]]) -> None:
    print(f"\n== through the {path} ==")
    print(f"{'sessions':>8} | {'mode':6} | {'aggregate tok/s':>15} | {'x 1 session':>11} | {'per-session tok/s':>17} | "
          f"{'burst TTFT p50/p95 ms':>21} | {'spread TTFT p50/p95 ms':>22}")
    for index in range(len(results["batch"])):
        for mode in ("queue", "batch"):
            level, one = results[mode][index], results[mode][0]
            scaling = level.aggregate / one.aggregate
            print(f"{level.sessions:>8} | {mode:6} | {level.aggregate:15.1f} | {scaling:10.2f}x | "
                  f"{level.per_session:17.1f} | {level.ttft_p50 * 1000:9.0f} / {level.ttft_p95 * 1000:9.0f} | "
                  f"{level.spread_p50 * 1000:10.0f} / {level.spread_p95 * 1000:9.0f}")
    batch, queue = results["batch"], results["queue"]
    print("ratios (batch):", ", ".join(f"{lv.sessions} sessions {lv.aggregate / batch[0].aggregate:.2f}x"
                                       for lv in batch[1:]),
          f" | one session vs queue {batch[0].aggregate / queue[0].aggregate:.3f}x"
          f" | TTFT p95 at {batch[-1].sessions} (spread) / one session {batch[-1].spread_p95 / batch[0].ttft_p50:.2f}x"
          f" (burst {batch[-1].ttft_p95 / batch[0].ttft_p50:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="a local model folder ('' = the embedded SmolLM2)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--paths", nargs="+", default=["client", "server"], choices=["client", "server"])
    args = parser.parse_args()

    context = multiprocessing.get_context("spawn")
    modes = {"queue": 1, "batch": max(args.sessions)}
    for path in args.paths:
        connections = {}
        processes = []
        for mode, max_batch in modes.items():
            mine, theirs = context.Pipe()
            process = context.Process(target=worker, args=(theirs, args.model, max_batch, path))
            process.start()
            processes.append(process)
            connections[mode] = mine
        described = {mode: conn.recv() for mode, conn in connections.items()}
        print(f"\nmodel: {described['batch']}; {args.tokens} new tokens per request, greedy, EOS ignored")
        lone_s = {}
        for mode, conn in connections.items():
            conn.send(("lone", args.tokens))
            lone_s[mode] = conn.recv()
        results: dict[str, list[Level]] = {"queue": [], "batch": []}
        for sessions in args.sessions:  # the modes take turns, level by level, so drift hits both alike
            for mode, conn in connections.items():
                conn.send(("measure", sessions, args.tokens, lone_s[mode]))
                results[mode].append(conn.recv())
        report(path, results)
        for conn in connections.values():
            conn.send(("stop",))
        for process in processes:
            process.join(60)


if __name__ == "__main__":
    main()
