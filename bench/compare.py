"""The Compare page's two targets on one model (the model picker's at two temperatures, its default pair): on one
shared engine, as the page runs them, against two engines of the same model (what two apps or two windows of a
tool that loads a model per pane would do), and against one engine asked twice, one answer after the other.

Each mode runs in a process of its own, through the Compare runner (app/compare/compare_run.py) with a ClientPool, and
reports the wall time from sending to the last token of both answers, each answer's decode speed, and the memory
the process gained by loading the models (resident set after loading minus before, torch already imported). Every
answer is exactly N new tokens (EOS ignored), seeded. Targets (SmolLM2 on a 2-core CPU): shared wall time <= 0.75x
one after another, and within 1.15x of two engines' (which need their own memory for a model in another precision
or another file; two engines of one float32 file on a CPU share its memory-mapped weights).

    .venv/bin/python -m bench.compare [--model PATH] [--tokens 96] [--rounds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from dataclasses import replace
from typing import Any

PROMPT = "Write a long story about a dragon who learns to cook."
MODES = ("shared", "two engines", "one after another")


def worker(conn: Any, model: str, mode: str, tokens: int, rounds: int) -> None:
    import psutil
    import torch  # noqa: F401 - imported before the first reading: the memory counted is the models'
    import transformers  # noqa: F401

    from app.clients.client_protocol import GenerationParams
    from app.clients.pool import ClientPool
    from app.compare.compare_run import run_all
    from app.compare.targets import Target
    from app.config import ModelSettings
    from app.domain.conversation import Conversation, Message

    process = psutil.Process()
    before = process.memory_info().rss
    settings = ModelSettings(model_path=model, device="cpu")
    # Two engines of one model: settings that differ only where it does not change the answer.
    other = replace(settings, prompt_cache_mb=settings.prompt_cache_mb + 1) if mode == "two engines" else settings
    params = GenerationParams(temperature=0.2, max_new_tokens=tokens, ignore_eos=True, seed=1)
    targets = [Target("cool", settings, params), Target("hot", other, replace(params, temperature=1.0, seed=2))]
    pool = ClientPool()
    for target in targets:
        pool.get(target.settings)
    loaded = process.memory_info().rss - before
    question = Conversation([Message("user", PROMPT)])
    run_all(targets, question, pool.get)  # warm-up: the first forward passes are slow
    walls, speeds = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        if mode == "one after another":
            results = [run_all([target], question, pool.get)[0] for target in targets]
        else:
            results = run_all(targets, question, pool.get)
        walls.append(time.perf_counter() - start)
        for result in results:
            assert result.error is None and result.metrics.completion_tokens == tokens, result.error
            speeds.append(result.metrics.tokens_per_second or 0.0)
    pool.close()
    conn.send({"wall_s": statistics.median(walls), "tok_s": statistics.median(speeds), "loaded_mb": loaded / 1e6})
    conn.close()


def run_mode(model: str, mode: str, tokens: int, rounds: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=worker, args=(child, model, mode, tokens, rounds))
    process.start()
    result = parent.recv()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="a local model folder ('' = the embedded SmolLM2)")
    parser.add_argument("--tokens", type=int, default=96, help="new tokens per answer (EOS ignored)")
    parser.add_argument("--rounds", type=int, default=2, help="measured comparisons per mode (median)")
    args = parser.parse_args()
    from app.clients.embedded_model import ensure_embedded_model

    model = args.model or str(ensure_embedded_model())
    figures = {mode: run_mode(model, mode, args.tokens, args.rounds) for mode in MODES}
    print(f"Two targets, {args.tokens} tokens each, on {model}")
    print(f"{'mode':<20}{'wall s':>10}{'tok/s per answer':>20}{'memory loaded MB':>20}")
    for mode, row in figures.items():
        print(f"{mode:<20}{row['wall_s']:>10.2f}{row['tok_s']:>20.1f}{row['loaded_mb']:>20.0f}")
    shared, two, sequential = (figures[mode] for mode in MODES)
    print(f"shared / one after another, wall time: {shared['wall_s'] / sequential['wall_s']:.2f}x (target <= 0.75)")
    print(f"shared / two engines, wall time:       {shared['wall_s'] / two['wall_s']:.2f}x (target <= 1.15)")
    print(f"shared / two engines, memory:          {shared['loaded_mb'] / two['loaded_mb']:.2f}x")


if __name__ == "__main__":
    main()
