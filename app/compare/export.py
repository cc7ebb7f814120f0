"""Votes and the leaderboard as JSON and CSV, for download. CSV cells that a spreadsheet would take for a formula
are escaped (safe_cell)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from app.compare.ratings import Standing
from app.storage.compare_votes import CompareVote

VOTE_COLUMNS = ("id", "created_at", "verdict", "winner", "label_a", "label_b", "prompt", "answer_a", "answer_b",
                "ttft_s_a", "tokens_per_second_a", "ttft_s_b", "tokens_per_second_b", "settings_a", "settings_b")
LEADERBOARD_COLUMNS = ("rank", "label", "rating", "ci_low", "ci_high", "standard_error", "elo", "games", "wins",
                       "losses", "ties", "both_bad", "win_rate", "median_ttft_s", "median_tokens_per_second")


def vote_to_json(vote: CompareVote) -> dict[str, Any]:
    return {"id": vote.id, "created_at": vote.created_at.isoformat(), "verdict": vote.verdict,
            "targets": vote.targets, "prompt": vote.prompt, "answers": vote.answers, "metrics": vote.metrics}


def votes_json(votes: Sequence[CompareVote]) -> str:
    return json.dumps([vote_to_json(vote) for vote in votes], ensure_ascii=False, indent=2)


def votes_csv(votes: Sequence[CompareVote]) -> str:
    rows = []
    for vote in votes:
        (label_a, label_b), (metrics_a, metrics_b) = vote.labels, vote.metrics
        winner = {"a": label_a, "b": label_b}.get(vote.verdict, vote.verdict)
        rows.append({
            "id": vote.id, "created_at": vote.created_at.isoformat(), "verdict": vote.verdict, "winner": winner,
            "label_a": label_a, "label_b": label_b, "prompt": vote.prompt, "answer_a": vote.answers[0],
            "answer_b": vote.answers[1], "ttft_s_a": _cell(metrics_a.get("ttft_s")),
            "tokens_per_second_a": _cell(metrics_a.get("tokens_per_second")),
            "ttft_s_b": _cell(metrics_b.get("ttft_s")),
            "tokens_per_second_b": _cell(metrics_b.get("tokens_per_second")),
            "settings_a": json.dumps(vote.targets[0].get("settings", {}), ensure_ascii=False),
            "settings_b": json.dumps(vote.targets[1].get("settings", {}), ensure_ascii=False),
        })
    return _csv(VOTE_COLUMNS, rows)


def leaderboard_json(standings: Sequence[Standing]) -> str:
    return json.dumps([{"rank": rank, **standing.to_json()} for rank, standing in enumerate(standings, start=1)],
                      ensure_ascii=False, indent=2)


def leaderboard_csv(standings: Sequence[Standing]) -> str:
    rows = [{"rank": rank, **{key: _cell(value) for key, value in standing.to_json().items()}}
            for rank, standing in enumerate(standings, start=1)]
    return _csv(LEADERBOARD_COLUMNS, rows)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return value


# A cell a spreadsheet would read as a formula (OWASP "CSV injection"): prompts, answers and labels are anyone's text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: Any) -> Any:
    """`value` as a spreadsheet shows it, never runs it: text that starts like a formula gets a leading single quote
    (OWASP's advice; Excel, LibreOffice and Google Sheets then show it as text). Numbers, "-0.5" too, stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def _csv(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    # RFC 4180's CRLF: the writer quotes a field holding either character of its line terminator, so an answer's
    # lone carriage return stays inside its cell instead of splitting the row.
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows({key: safe_cell(value) for key, value in row.items()} for row in rows)
    return out.getvalue()
