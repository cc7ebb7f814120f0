"""`python -m app.compare` (app/compare/cli.py): prompts from a JSONL file against targets from a JSON file, a report
in JSON and CSV; end to end on the tiny random model, and what it says about input it cannot use."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.compare.cli import main
from app.compare.report import CSV_COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_the_cli_runs_every_prompt_on_every_target_and_writes_json_and_csv(tiny_model_dir, tmp_path, capsys):
    model = {"path": str(tiny_model_dir), "device": "cpu", "dtype": "float32"}
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": [
        {"label": "greedy", "model": model, "sampling": {"temperature": 0, "max_new_tokens": 200}},
        {"label": "hot", "model": model, "sampling": {"temperature": 1.0, "seed": 5, "max_new_tokens": 12},
         "system_prompt": "Be brief.", "tool_choice": "none"},
    ]}))
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [
        {"prompt": "Say hello.", "id": "hello"},
        {"prompt": "What is 17 * 23?", "tools": ["calculator"], "tool_choice": "calculator", "id": "mult"},
    ])
    out = tmp_path / "reports" / "run"
    assert main(["--targets", str(targets), "--prompts", str(prompts), "--out", str(out), "--max-rounds", "2"]) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}.json and {out}.csv" in captured.out
    assert "[2/2] greedy:" in captured.err and "tool call(s)" in captured.err

    report = json.loads((tmp_path / "reports" / "run.json").read_text())
    assert report["complete"] is True
    assert [t["label"] for t in report["targets"]] == ["greedy", "hot"]
    assert report["targets"][1]["params"]["temperature"] == 1.0 and report["targets"][1]["tool_choice"] == "none"
    rows = report["results"]
    assert [(r["prompt_id"], r["target"]) for r in rows] == [("hello", "greedy"), ("hello", "hot"),
                                                             ("mult", "greedy"), ("mult", "hot")]
    for row in rows:
        assert row["error"] is None, row
        metrics = row["metrics"]
        assert metrics["completion_tokens"] > 0 and metrics["prompt_tokens"] > 0
        assert metrics["ttft_s"] is not None and metrics["ttft_s"] >= 0
    assert rows[1]["metrics"]["completion_tokens"] <= 12
    # The forced call: written by the real engine under its grammar, so it parses and matches the schema, then runs
    # (the random model's expression is nonsense to the calculator, or not: either way it ran and said so).
    [call] = rows[2]["tool_calls"]
    assert (call["name"], call["parsed"], call["schema_valid"]) == ("calculator", True, True)
    assert call["status"] in ("ok", "failed") and call["result"]
    assert rows[2]["metrics"]["generations"] == 2  # the call, then the answer from its result
    assert rows[3]["tool_calls"] == []  # the target's own choice: no tools

    with (tmp_path / "reports" / "run.csv").open(newline="", encoding="utf-8") as file:
        table = list(csv.DictReader(file))
    assert tuple(table[0]) == CSV_COLUMNS
    assert [(r["prompt_id"], r["target"]) for r in table] == [(r["prompt_id"], r["target"]) for r in rows]
    assert [r["answer"] for r in table] == [r["answer"] for r in rows]  # multi-line answers survive CSV
    assert (table[2]["tool_calls"], table[2]["calls_parsed"], table[2]["calls_schema_valid"]) == ("1", "1", "1")
    assert json.loads(table[2]["tool_calls_json"])[0]["name"] == "calculator"
    assert table[0]["error"] == "" and float(table[0]["ttft_s"]) >= 0


def test_unusable_input_is_refused_before_any_model_loads(tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Hi"}])
    targets = tmp_path / "targets.json"
    targets.write_text('{"targets": [{"label": "A", "sampling": {"temperature": -1}}]}')
    assert main(["--targets", str(targets), "--prompts", str(prompts), "--out", str(tmp_path / "r")]) == 2
    assert "target 1 ('A'): sampling.temperature: Input should be greater than or equal to 0" in capsys.readouterr().err
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "Hi", "tools": ["launch_rocket"]}])
    assert main(["--prompts", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "bad.jsonl, line 1: unknown tool 'launch_rocket'" in capsys.readouterr().err
    assert main(["--prompts", str(prompts), "--approve", "launch_rocket", "--out", str(tmp_path / "r")]) == 2
    assert "--approve launch_rocket: no such tool" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--prompts", str(prompts), "--max-rounds", "0"])
    assert not list(tmp_path.glob("r.*"))  # no report for a run that never started


def test_python_dash_m_app_compare_is_the_command(tmp_path):
    broken = tmp_path / "prompts.jsonl"
    broken.write_text('{"prompt": "Hi",}\n')
    done = subprocess.run([sys.executable, "-m", "app.compare", "--prompts", str(broken)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"error: {broken}, line 1: not valid JSON" in done.stderr


def test_make_compare_runs_the_cli_with_the_files_it_is_given():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "PROMPTS", "TARGETS", "REPORT")}

    def dry_run(*assignments: str) -> str:
        done = subprocess.run(["make", "-n", "compare", *assignments], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.replace("\\\n", " ").split())  # one line, as the shell runs it

    assert (".venv/bin/python -m app.compare --prompts examples/compare/prompts.jsonl "
            "--targets examples/compare/targets.json --out compare-report") in dry_run()
    planned = dry_run("PROMPTS=mine.jsonl", "TARGETS=", "REPORT=out/run", "APPROVE=count_words calculator")
    assert ".venv/bin/python -m app.compare --prompts mine.jsonl --out out/run " \
           "--approve count_words --approve calculator" in planned


def test_with_a_collection_every_target_answers_a_prompt_from_the_same_passages(tiny_model_dir, tmp_path, database,
                                                                                  capsys):
    from app.knowledge.ingest import add_file
    from app.storage.knowledge import KnowledgeStore
    from tests.knowledge_fixtures import FACTS

    knowledge = KnowledgeStore(database.engine)
    collection = knowledge.create_collection("local", "Local history")
    add_file(knowledge, "local", collection.id, "notes.md", "\n\n".join(
        [FACTS[37][0], "The mill burned down in 1902.", "Sheep were sold at the fair."]).encode())
    model = {"path": str(tiny_model_dir), "device": "cpu", "dtype": "float32"}
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": [
        {"label": "greedy", "model": model, "sampling": {"temperature": 0, "max_new_tokens": 4}},
        {"label": "hot", "model": model, "sampling": {"temperature": 1.0, "seed": 5, "max_new_tokens": 4}}]}))
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": FACTS[37][1]}, {"prompt": "Hello there"}])
    out = tmp_path / "run"
    argv = ["--targets", str(targets), "--prompts", str(prompts), "--out", str(out)]
    assert main([*argv, "--collection", "Local history"]) == 0
    results = json.loads((tmp_path / "run.json").read_text())["results"]
    cited = [result.get("sources") for result in results]
    assert cited[0] == cited[1] and cited[0][0]["document"] == "notes.md" and cited[0][0]["location"] == "line 1"
    assert cited[2] is None and cited[3] is None  # nothing in the collection is about a greeting
    with (tmp_path / "run.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["sources"] == rows[1]["sources"] == "[1] notes.md · line 1" and rows[2]["sources"] == ""

    capsys.readouterr()
    assert main([*argv, "--collection", "Local histories"]) == 2
    said = capsys.readouterr().err
    assert "no knowledge collection named 'Local histories'" in said and "'Local history'" in said
