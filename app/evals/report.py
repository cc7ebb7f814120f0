"""An eval run's report: per target, the pass rate with its 95% interval, latency and token figures, and tool-call
validity; per case and target, what passed; and against a previous report of the same set, each case that went
from passing to failing (a regression) or back. Written as JSON, which is also what the next run compares with."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.evals.runner import CaseRun
from app.evals.stats import PassRate, pass_rate

FORMAT = "composite-demo-eval-report"


@dataclass(frozen=True)
class TargetSummary:
    label: str
    passes: PassRate
    median_latency_s: float | None
    median_tokens: float | None
    tool_calls: int
    valid_tool_calls: int
    model_judged_checks: int

    def to_json(self) -> dict[str, Any]:
        return {"target": self.label, "passed": self.passes.passed, "runs": self.passes.runs,
                "pass_rate": self.passes.rate, "ci_low": self.passes.low, "ci_high": self.passes.high,
                "median_latency_s": self.median_latency_s, "median_tokens": self.median_tokens,
                "tool_calls": self.tool_calls, "valid_tool_calls": self.valid_tool_calls,
                "model_judged_checks": self.model_judged_checks}


@dataclass(frozen=True)
class Change:
    """A case whose outcome on a target differs from the previous report's."""

    case: str
    target: str
    before: str  # "pass", "fail" or "mixed" (some repeats passed)
    after: str

    @property
    def regression(self) -> bool:
        return self.before == "pass" and self.after != "pass"


def summarise(runs: Sequence[CaseRun]) -> list[TargetSummary]:
    labels = list(dict.fromkeys(run.target for run in runs))
    summaries = []
    for label in labels:
        mine = [run for run in runs if run.target == label]
        latencies = [run.result.total_time_s for run in mine]
        tokens = [run.result.metrics.completion_tokens for run in mine]
        summaries.append(TargetSummary(
            label, pass_rate(sum(run.passed for run in mine), len(mine)),
            statistics.median(latencies) if latencies else None, statistics.median(tokens) if tokens else None,
            sum(len(run.result.calls) for run in mine), sum(sum(c.valid for c in run.result.calls) for run in mine),
            sum(check.model_judged for run in mine for check in run.checks)))
    return summaries


def outcomes(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(case, target) -> pass, fail or mixed, from a report's runs."""
    seen: dict[tuple[str, str], list[bool]] = {}
    for run in runs:
        seen.setdefault((str(run["case"]), str(run["target"])), []).append(bool(run["passed"]))
    return {key: "pass" if all(passed) else "fail" if not any(passed) else "mixed" for key, passed in seen.items()}


def changes(previous: dict[str, Any], current: dict[str, Any]) -> list[Change]:
    """What changed between two reports of the same set, per case and target they both ran."""
    before, after = outcomes(previous["runs"]), outcomes(current["runs"])
    return [Change(case, target, before[(case, target)], now) for (case, target), now in after.items()
            if (case, target) in before and before[(case, target)] != now]


def report(set_name: str, runs: Sequence[CaseRun], targets: Sequence[dict[str, Any]],
           started: datetime) -> dict[str, Any]:
    return {"format": FORMAT, "version": 1, "set": set_name, "started": started.isoformat(),
            "finished": datetime.now(UTC).isoformat(), "targets": list(targets),
            "summary": [summary.to_json() for summary in summarise(runs)], "runs": [run.to_json() for run in runs]}


def read_report(path: Path) -> dict[str, Any]:
    """A previous report, checked enough to compare with (ValueError saying what is wrong)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the previous report {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("runs"), list) or any(
            not isinstance(run, dict) or not {"case", "target", "passed"} <= run.keys() for run in data["runs"]):
        raise ValueError(f"{path} is not an eval report (format {FORMAT!r} with runs)")
    return data
