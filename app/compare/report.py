"""A headless comparison's report: report.json (the targets, then one entry per prompt and target with the answer,
its figures and its tool calls) and report.csv (one row per prompt and target, the tool calls summed up and, in
full, as JSON in their own column)."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.compare.results import TargetResult
from app.compare.targets import Target
from app.domain.conversation import Source

CSV_COLUMNS = ("prompt_index", "prompt_id", "prompt", "target", "answer", "error", "finish_reason", "stopped",
               "ttft_s", "tokens_per_second", "completion_tokens", "prompt_tokens", "cached_tokens", "generations",
               "total_time_s", "tool_calls", "calls_parsed", "calls_schema_valid", "calls_ok", "tool_calls_json",
               "sources")


@dataclass(frozen=True)
class ReportRow:
    prompt_index: int  # 0-based, in the prompts file's order
    prompt_id: str
    prompt: str
    result: TargetResult
    sources: tuple[Source, ...] = ()  # the passages every target was given for this prompt (--collection)

    def to_json(self) -> dict[str, Any]:
        cited = {"sources": [{"number": source.number, "document": source.document, "location": source.location,
                              "passage_id": source.passage_id, "text": source.text} for source in self.sources]
                 } if self.sources else {}
        return {"prompt_index": self.prompt_index, "prompt_id": self.prompt_id, "prompt": self.prompt,
                "target": self.result.label, **{k: v for k, v in self.result.to_json().items() if k != "label"},
                **cited}

    def to_csv(self) -> dict[str, Any]:
        result = self.result
        metrics = result.metrics
        calls = result.calls
        return {
            "prompt_index": self.prompt_index, "prompt_id": self.prompt_id, "prompt": self.prompt,
            "target": result.label, "answer": result.answer, "error": result.error or "",
            "finish_reason": result.finish_reason or "", "stopped": result.stopped,
            "ttft_s": _number(metrics.time_to_first_token_s), "tokens_per_second": _number(metrics.tokens_per_second),
            "completion_tokens": metrics.completion_tokens, "prompt_tokens": metrics.prompt_tokens,
            "cached_tokens": metrics.cached_tokens, "generations": metrics.generations,
            "total_time_s": _number(metrics.total_time_s),
            "tool_calls": len(calls), "calls_parsed": sum(call.parsed for call in calls),
            "calls_schema_valid": sum(call.valid for call in calls),
            "calls_ok": sum(call.status == "ok" for call in calls),
            "tool_calls_json": json.dumps([call.to_json() for call in calls], ensure_ascii=False) if calls else "",
            "sources": "; ".join(f"[{source.number}] {source.document} · {source.location}" for source in self.sources),
        }


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def report_json(targets: list[Target], rows: list[ReportRow], started: datetime, complete: bool = True
                ) -> dict[str, Any]:
    return {"created_at": started.astimezone(UTC).isoformat(), "complete": complete,
            "targets": [target.describe() for target in targets], "results": [row.to_json() for row in rows]}


def report_csv(rows: list[ReportRow]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row.to_csv())
    return out.getvalue()


def report_paths(out: str | Path) -> tuple[Path, Path]:
    """`out` names both files: report → report.json and report.csv (a .json or .csv suffix given is replaced)."""
    base = Path(out).expanduser()
    if base.suffix in (".json", ".csv"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".json"), base.with_name(base.name + ".csv")


def write_report(out: str | Path, targets: list[Target], rows: list[ReportRow], started: datetime,
                 complete: bool = True) -> tuple[Path, Path]:
    """Write report.json and report.csv (each whole or not at all: written aside, then renamed); their paths."""
    json_path, csv_path = report_paths(out)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report_json(targets, rows, started, complete), ensure_ascii=False, indent=2, allow_nan=False)
    _write(json_path, text + "\n")
    _write(csv_path, report_csv(rows))
    return json_path, csv_path


def _write(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def now() -> datetime:
    return datetime.now(UTC)
