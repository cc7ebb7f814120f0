"""`python -m app.evals` (`make eval SET=... TARGETS=...`): an eval set run on targets, headless. Prints each
target's pass rate and writes a JSON report; given the previous report (--baseline), names every case that went from
passing to failing and exits with 1, so that a CI job fails on a regression. 2: unusable input, or a run that
could not finish (never 1, which means a regression). Spans go to a collector where the OTEL_* variables say."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from app.config import offline_by_default


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.evals", description=__doc__)
    parser.add_argument("--set", required=True, help="the eval set: a YAML or JSON file")
    parser.add_argument("--targets", help="the targets: JSON, as `make compare` takes (default: the app's model)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each case on each target, seeds SEED, "
                                                                "SEED+1, ... (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the first repeat's seed (default 0)")
    parser.add_argument("--baseline", help="the previous report of this set: regressions against it exit with 1")
    parser.add_argument("--out", default="eval-report.json", help="where the report goes (default eval-report.json)")
    parser.add_argument("--approve", action="append", default=[], metavar="TOOL",
                        help="let this tool's calls run although its policy asks first (repeatable)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="stop a case's answers "
                                                                                       "still running after this")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    offline_by_default()
    from datetime import UTC, datetime

    from app.clients.pool import ClientPool
    from app.compare.targets import TargetsError, default_targets, load_targets
    from app.evals.files import EvalFileError, read_set
    from app.evals.judge import judge_from
    from app.evals.report import changes, read_report, report, summarise
    from app.evals.runner import run_set
    from app.telemetry.setup import configure_tracing, flush
    from app.tools import load_tools

    configure_tracing()

    try:
        eval_set = read_set(Path(args.set))
        targets = load_targets(args.targets) if args.targets else default_targets()[:1]
        baseline = read_report(Path(args.baseline)) if args.baseline else None
    except (EvalFileError, TargetsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started, pool = datetime.now(UTC), ClientPool()
    try:
        runs = run_set(eval_set, targets, pool.get, load_tools(), repeats=args.repeats, seed=args.seed,
                       approved=args.approve, timeout_s=args.timeout, judge=judge_from(targets, pool.get),
                       on_run=lambda run: print(f"{run.target} · {run.case} #{run.repeat + 1}: "
                                                f"{'pass' if run.passed else 'FAIL (' + run.why_failed() + ')'}",
                                                file=sys.stderr))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a fault of the app or an engine: not a regression, so not 1
        print(f"error: the run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        pool.close()
        flush()
    written = report(eval_set.name, runs, [target.describe() for target in targets], started)
    try:
        Path(args.out).write_text(json.dumps(written, ensure_ascii=False, indent=2), encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for summary in summarise(runs):
        print(f"{summary.label}: {summary.passes.describe()}")
    print(f"wrote {args.out}")
    if baseline is None:
        return 0
    found = changes(baseline, written)
    for change in found:
        word = "REGRESSION" if change.regression else "changed"
        print(f"{word}: {change.case} on {change.target}: {change.before} -> {change.after}")
    return 1 if any(change.regression for change in found) else 0


if __name__ == "__main__":
    sys.exit(main())
