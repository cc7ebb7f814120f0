"""`python -m app.compare` (`make compare`): every prompt of a JSONL file sent to every target at once, one prompt
after another, and a report of each answer, its figures and its tool calls (report.json, report.csv).

Offline like the app: nothing is downloaded from a model hub unless DEMO_ALLOW_DOWNLOADS=1. Tools whose run policy
asks first (app/tools/policy.py) do not run, since nobody is there to ask, unless named with --approve: their calls
are reported as waiting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.config import offline_by_default

if TYPE_CHECKING:  # imported for real only after offline_by_default(): huggingface_hub reads it at import
    from app.compare.results import TargetResult

DEFAULT_OUT = "compare-report"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m app.compare",
        description="Send every prompt of a JSONL file to several targets (backend, model, settings) at once and "
                    "write a report of their answers, figures and tool calls (JSON and CSV).")
    parser.add_argument("--prompts", required=True,
                        help='JSONL, one prompt a line: {"prompt": "...", "tools": ["calculator"], '
                             '"tool_choice": "auto"}')
    parser.add_argument("--targets", help='JSON: {"targets": [{"label": ..., "model": {...}, "sampling": {...}}]} '
                                          "(default: the app's model at its own defaults and at another temperature)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"the report's path without suffix: writes OUT.json and OUT.csv (default {DEFAULT_OUT})")
    parser.add_argument("--approve", action="append", default=[], metavar="TOOL",
                        help="let this tool's calls run although its policy asks first (repeatable)")
    parser.add_argument("--collection", action="append", default=[], metavar="NAME",
                        help="answer from this knowledge collection of the app's database (repeatable): each prompt "
                             "is searched once, and every target gets the same passages")
    parser.add_argument("--owner", help="whose collections --collection names (default: local, the app without "
                                        "sign-in)")
    parser.add_argument("--max-rounds", type=int, default=4, help="model calls per turn with tools (default 4)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop a prompt's answers still running after this long (default: no limit)")
    args = parser.parse_args(argv)
    if args.max_rounds < 1:
        parser.error("--max-rounds must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        parser.error("--timeout must be positive")
    if args.owner is not None and not args.collection:
        parser.error("--owner names whose --collection to search: give a --collection too")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; 0 when the report is written (answers that failed say so in it), 2 for unusable input,
    1 when the collections could not be searched and 130 when interrupted (the report then holds the prompts
    done)."""
    args = parse_args(argv)
    offline_by_default()  # before anything that could reach a model hub is imported
    from app.agent.loop import ToolSettings
    from app.clients.pool import ClientPool
    from app.compare.compare_run import run_all
    from app.compare.prompt_set import PromptsError, load_prompts
    from app.compare.report import ReportRow, now, write_report
    from app.compare.targets import TargetsError, default_targets, load_targets
    from app.domain.conversation import Conversation, Message
    from app.storage.errors import StorageError
    from app.tools import load_tools
    from app.tools.policy import RunPolicy, policy_for

    registry = load_tools()
    try:
        targets = load_targets(args.targets) if args.targets else default_targets()
        prompts = load_prompts(args.prompts, registry.names)
    except (TargetsError, PromptsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    unknown = [name for name in args.approve if name not in registry]
    if unknown:
        print(f"error: --approve {unknown[0]}: no such tool (the tools: {', '.join(registry.names)})",
              file=sys.stderr)
        return 2
    approved: dict[str, RunPolicy] = dict.fromkeys(args.approve, "auto")
    knowledge = None
    if args.collection:
        from sqlalchemy.exc import ArgumentError

        from app.compare.knowledge import CollectionsError, PromptKnowledge
        from app.storage import open_database

        try:
            knowledge = PromptKnowledge.open(open_database(), args.owner or "local", args.collection)
        except (CollectionsError, StorageError, ArgumentError) as exc:  # ArgumentError: a DEMO_DATABASE_URL typo
            print(f"error: --collection: {exc}", file=sys.stderr)
            return 2

    started, rows, status = now(), list[ReportRow](), 0
    pool = ClientPool()
    try:
        for index, spec in enumerate(prompts):
            tools = None
            if spec.tools:
                chosen = registry.subset(spec.tools)
                tools = ToolSettings(chosen, choice=spec.tool_choice, max_rounds=args.max_rounds,
                                     policies={tool.name: policy_for(tool, approved) for tool in chosen})
            conversation = Conversation([Message("user", spec.prompt)])
            try:
                sources = tuple(knowledge.add_to(conversation)) if knowledge is not None else ()
            except StorageError as exc:  # not answered without the passages it was to be given: that is not the test
                print(f"error: prompt {index + 1}: the collections could not be searched ({exc}); the report holds "
                      "the prompts done", file=sys.stderr)
                status = 1
                break
            results = run_all(targets, conversation, pool.get, tools, timeout_s=args.timeout)
            for result in results:
                rows.append(ReportRow(index, spec.id or str(index + 1), spec.prompt, result, sources))
                print(f"[{index + 1}/{len(prompts)}] {result.label}: {_summary(result)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: the report holds the prompts done", file=sys.stderr)
        status = 130
    finally:
        pool.close()
        if knowledge is not None:
            knowledge.store.engine.dispose()
    json_path, csv_path = write_report(args.out, targets, rows, started, complete=status == 0)
    print(f"wrote {json_path} and {csv_path}")
    return status


def _summary(result: TargetResult) -> str:
    metrics = result.metrics
    parts = [f"{metrics.completion_tokens} tokens"]
    if metrics.time_to_first_token_s is not None:
        parts.append(f"TTFT {metrics.time_to_first_token_s:.2f} s")
    if metrics.tokens_per_second is not None:
        parts.append(f"{metrics.tokens_per_second:.1f} tok/s")
    if result.calls:
        valid = sum(call.valid for call in result.calls)
        parts.append(f"{len(result.calls)} tool call(s), {valid} valid")
    if result.error:
        parts.append(f"error: {result.error}")
    elif result.stopped:
        parts.append("stopped")
    return ", ".join(parts)
