"""Do the embedded model's first answers make sense with the model's defaults, compared with the settings before?

Runs every conversation of tests/data/smoke_set.json through the same turn the Chat page runs (agent.run_turn,
max new tokens 512) for several seeds, once per column, and prints side by side how many answers contain the
expected fact and how many ran to the token limit (the mark of a repetition loop):

- "model defaults": what the sidebar starts with now (app/clients/generation_defaults.py; for SmolLM2 its card's
  temperature 0.2 / top p 0.9 and repetition penalty 1.1; no system prompt of ours, so the template's own);
- "before": what every model got before (temperature 0.7, top p 0.9, top k 50, repetition penalty 1.0, and the
  system prompt "You are a helpful, concise assistant.");
- any `--profile NAME=KEY:VALUE,...` (the model defaults with those values changed).

    .venv/bin/python -m bench.smoke_set [--model PATH] [--seeds 3] [--profile rep1.0=repetition_penalty:1.0]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.agent.loop import TurnDone, run_turn
from app.clients.client_protocol import GenerationParams
from app.clients.generation_defaults import BUILT_IN
from app.clients.hf.hf_client import HFClient
from app.config import ModelSettings
from app.domain.conversation import Conversation, Message
from app.frontends.streamlit.sidebar import DEFAULT_SYSTEM_PROMPT

ROOT = Path(__file__).resolve().parent.parent
SMOKE_SET = ROOT / "tests" / "data" / "smoke_set.json"
BEFORE = (dict(BUILT_IN), "You are a helpful, concise assistant.")
LISTS = {"conversations": "smoke set (CI)", "beyond_the_embedded_model": "beyond the embedded model"}


@dataclass
class Tally:
    right: int = 0
    cut: int = 0
    answers: int = 0
    tokens: int = 0
    misses: list[str] = field(default_factory=list)


def answer(client: HFClient, turns: list[str], params: GenerationParams, system_prompt: str) -> Message:
    conversation = Conversation()
    last = Message(role="assistant")
    for text in turns:
        conversation.add(Message(role="user", content=text))
        for event in run_turn(client, conversation, params, system_prompt):
            if isinstance(event, TurnDone):
                last = event.message
    return last


def record(tally: Tally, reply: Message, item: dict, seed: int) -> None:
    tally.answers += 1
    tally.tokens += reply.metrics.completion_tokens if reply.metrics else 0
    cut = bool(reply.metrics and reply.metrics.finish_reason == "length")
    right = bool(re.search(item["expect"], reply.content, re.IGNORECASE))
    tally.cut += cut
    tally.right += right
    if cut or not right:
        what = ", ".join(["cut at the limit"] * cut + ["wrong"] * (not right))
        tally.misses.append(f"seed {seed} · {item['turns'][-1]} ({what}) → {reply.content[:80]!r}")


def profiles(client: HFClient, extra: list[str]) -> dict[str, tuple[dict, str]]:
    chosen = {"model defaults": (client.generation_defaults.values, DEFAULT_SYSTEM_PROMPT), "before": BEFORE}
    for spec in extra:
        name, _, pairs = spec.partition("=")
        values = dict(client.generation_defaults.values)
        for key, _, value in (pair.partition(":") for pair in pairs.split(",")):
            values[key] = int(value) if key == "top_k" else float(value)
        chosen[name] = (values, DEFAULT_SYSTEM_PROMPT)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="model folder (default: the embedded SmolLM2)")
    parser.add_argument("--dtype", default="auto", help="float32, bfloat16 (default: what the app loads)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--profile", action="append", default=[], metavar="NAME=KEY:VALUE,...",
                        help="another column: the model defaults with these values changed")
    args = parser.parse_args()
    client = HFClient(ModelSettings(model_path=args.model, device="cpu", dtype=args.dtype))
    data = json.loads(SMOKE_SET.read_text())
    columns = profiles(client, args.profile)
    print(f"{client.describe()}\nmodel defaults: {client.generation_defaults.describe()}")
    tallies = {(name, listed): Tally() for name in columns for listed in LISTS}
    for seed in range(args.seeds):
        for listed in LISTS:
            for item in data[listed]:
                for name, (values, system_prompt) in columns.items():
                    params = GenerationParams(**values, max_new_tokens=args.max_new_tokens, seed=seed)
                    record(tallies[name, listed], answer(client, item["turns"], params, system_prompt), item, seed)
                print(f"seed {seed}: {item['turns'][-1][:50]}", file=sys.stderr, flush=True)
    for listed, title in LISTS.items():
        print(f"\n{title}, {args.seeds} seeds\n{'':16s} {'right':>9s} {'cut at limit':>13s} {'mean tokens':>12s}")
        for name in columns:
            tally = tallies[name, listed]
            print(f"{name:16s} {tally.right:>4d}/{tally.answers:<4d} {tally.cut:>13d} "
                  f"{tally.tokens / max(tally.answers, 1):>12.1f}")
    for (name, listed), tally in tallies.items():
        print(f"\n{name} · {LISTS[listed]}: wrong or cut at the limit")
        print("\n".join(f"  {miss}" for miss in tally.misses) or "  none")


if __name__ == "__main__":
    main()
