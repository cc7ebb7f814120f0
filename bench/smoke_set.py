"""Do the embedded model's first answers make sense with the model's defaults, compared with the old fixed ones?

Runs every conversation of tests/data/smoke_set.json through the same turn the Chat page runs (agent.run_turn,
the sidebar's system prompt and max new tokens) for several seeds, once with the model's defaults
(app/generation_defaults.py: SmolLM2's card, temperature 0.2 / top p 0.9) and once with the settings every model
got before (temperature 0.7, top p 0.9, top k 50), and prints, side by side, how many answers contain the
expected fact and how many ran to the token limit.

    .venv/bin/python bench/smoke_set.py [--model PATH] [--seeds 3] [--max-new-tokens 512]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.agent import TurnDone, run_turn  # noqa: E402
from app.clients.base import GenerationParams  # noqa: E402
from app.clients.hf import HFClient  # noqa: E402
from app.config import ModelSettings  # noqa: E402
from app.conversation import Conversation, Message  # noqa: E402
from app.generation_defaults import BUILT_IN  # noqa: E402
from app.ui.sidebar import DEFAULT_SYSTEM_PROMPT  # noqa: E402

SMOKE_SET = ROOT / "tests" / "data" / "smoke_set.json"


@dataclass
class Tally:
    right: int = 0
    cut: int = 0
    answers: int = 0
    tokens: int = 0
    misses: list[str] = field(default_factory=list)


def answer(client: HFClient, turns: list[str], params: GenerationParams) -> Message:
    conversation = Conversation()
    last = Message(role="assistant")
    for text in turns:
        conversation.add(Message(role="user", content=text))
        for event in run_turn(client, conversation, params, DEFAULT_SYSTEM_PROMPT):
            if isinstance(event, TurnDone):
                last = event.message
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="model folder (default: the embedded SmolLM2)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    args = parser.parse_args()
    client = HFClient(ModelSettings(model_path=args.model, device="cpu"))
    conversations = json.loads(SMOKE_SET.read_text())["conversations"]
    profiles = {"model defaults": client.generation_defaults.values, "old fixed": BUILT_IN}
    print(f"{client.describe()}\nmodel defaults: {client.generation_defaults.describe()}\n")
    tallies = {name: Tally() for name in profiles}
    for seed in range(args.seeds):
        for item in conversations:
            for name, values in profiles.items():
                params = GenerationParams(**values, max_new_tokens=args.max_new_tokens, seed=seed)
                reply = answer(client, item["turns"], params)
                tally = tallies[name]
                tally.answers += 1
                tally.tokens += reply.metrics.completion_tokens if reply.metrics else 0
                if reply.metrics and reply.metrics.finish_reason == "length":
                    tally.cut += 1
                if item["expect"] is None or re.search(item["expect"], reply.content, re.IGNORECASE):
                    tally.right += 1
                else:
                    tally.misses.append(f"seed {seed} · {item['turns'][-1]} → {reply.content[:80]!r}")
            print(f"seed {seed}: {item['turns'][-1][:40]:40s} done", file=sys.stderr)
    print(f"{'':16s} {'right':>9s} {'cut at limit':>13s} {'mean tokens':>12s}")
    for name, tally in tallies.items():
        print(f"{name:16s} {tally.right:>4d}/{tally.answers:<4d} {tally.cut:>13d} {tally.tokens / tally.answers:>12.1f}")
    for name, tally in tallies.items():
        print(f"\n{name}: misses")
        print("\n".join(f"  {miss}" for miss in tally.misses) or "  none")


if __name__ == "__main__":
    main()
