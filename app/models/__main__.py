"""`python -m app.models [--context N] [PATH...]`: the models on this machine (or the given .gguf files and model
folders), one line each: where it was found, format and quantization, parameters, size, context, what its chat
template knows, licence, and whether it fits in memory at the context (default: each model's own). Nothing is
downloaded or loaded."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.clients.memory_fit import describe_bytes
from app.models.discovery import FoundModel, default_sources, describe_path, discover
from app.models.memory_at_context import fit_at_context
from app.models.model_files import describe_count


def line(model: FoundModel, context: int | None) -> str:
    files = model.files
    kind = files.format + (f" {files.quantization}" if files.quantization else "")
    parameters = f"{describe_count(files.parameters)} params" if files.parameters else "params unknown"
    knows = [name for name, known in (("tools", files.tools), ("thinking", files.thinking),
                                      ("pictures", files.vision)) if known]
    facts = [kind, parameters, describe_bytes(files.size_bytes),
             f"context {files.context_length:,}" if files.context_length else "context unknown",
             "knows " + ", ".join(knows) if knows else "plain chat",
             f"licence {files.licence}" if files.licence else "licence not stated", f"engine {files.engine}"]
    text = f"{model.name} ({model.source}: {files.path})\n    " + " · ".join(facts)
    if files.problems:
        return text + "\n    Problems: " + "; ".join(files.problems)
    return text + "\n    " + fit_at_context(files, context).describe()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.models", description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path, help=".gguf files or model folders (default: discover)")
    parser.add_argument("--context", type=int, default=None, help="context length for the memory estimate")
    args = parser.parse_args(argv)
    if args.paths:
        models = []
        for path in args.paths:
            found = describe_path(path)
            if found is None:
                print(f"{path}: not a .gguf file or a model folder (config.json and *.safetensors)", file=sys.stderr)
                return 2
            models.append(found)
    else:
        sources = default_sources()
        models = discover(sources)
        where = ", ".join(f"{source.label} ({source.path})" for source in sources) or "none of the usual places"
        print(f"Looked in: {where}. Add folders with DEMO_MODEL_DIRS.\n")
    if not models:
        print("No models found. The embedded SmolLM2 is always there (an empty model path).")
    for model in models:
        print(line(model, args.context))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
