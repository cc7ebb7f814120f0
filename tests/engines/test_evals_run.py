"""An eval set run headless (`python -m app.evals`) on scripted models with known answers: the report's pass
rates, a regression against the previous report named and the exit status set, and a changed case back to passing
not counted as one."""

from __future__ import annotations

import json

from app.evals.__main__ import main
from tests.tiny_model import build_scripted_model

SET = """
name: Arithmetic
cases:
  - name: multiplies
    messages: [{role: user, content: "What is 17 * 23?"}]
    sampling: {temperature: 0.0, max_new_tokens: 16}
    checks:
      - {type: contains, text: "391"}
      - {type: no_tool_call}
  - name: is short
    messages: [{role: user, content: "Say it briefly."}]
    checks:
      - {type: max_tokens, tokens: 16}
"""


def _targets(tmp_path, name: str, folder) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"targets": [{"label": "the model", "model": {
        "backend": "hf", "path": str(folder), "device": "cpu", "dtype": "float32"}}]}))
    return str(path)


def test_a_regression_is_named_and_sets_the_exit_status(tmp_path, capsys):
    right = build_scripted_model(tmp_path / "right", ["It", " is", " 391", "."])
    wrong = build_scripted_model(tmp_path / "wrong", ["It", " is", " 40", "."])
    eval_set = tmp_path / "arithmetic.yaml"
    eval_set.write_text(SET)
    first, second = tmp_path / "first.json", tmp_path / "second.json"

    assert main(["--set", str(eval_set), "--targets", _targets(tmp_path, "right", right), "--repeats", "2",
                 "--out", str(first)]) == 0
    report = json.loads(first.read_text())
    (summary,) = report["summary"]
    assert (summary["passed"], summary["runs"]) == (4, 4) and summary["ci_low"] > 0.45
    assert [run["seed"] for run in report["runs"]] == [0, 1, 0, 1]
    assert all(run["answer"] == "It is 391." for run in report["runs"])

    assert main(["--set", str(eval_set), "--targets", _targets(tmp_path, "wrong", wrong), "--out", str(second),
                 "--baseline", str(first)]) == 1
    said, progress = capsys.readouterr()
    assert "the model · multiplies #1: FAIL (contains: lacks '391')" in progress  # why, as each run ends
    assert "REGRESSION: multiplies on the model: pass -> fail" in said
    assert "is short" not in said  # still passing: no change to name
    assert json.loads(second.read_text())["summary"][0]["passed"] == 1

    assert main(["--set", str(eval_set), "--targets", _targets(tmp_path, "right", right), "--out",
                 str(tmp_path / "third.json"), "--baseline", str(second)]) == 0  # back to passing: no regression
    assert "changed: multiplies on the model: fail -> pass" in capsys.readouterr().out


def test_a_model_that_cannot_load_fails_each_run_saying_why(tmp_path, capsys):
    eval_set = tmp_path / "arithmetic.yaml"
    eval_set.write_text(SET)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    out = tmp_path / "report.json"
    assert main(["--set", str(eval_set), "--targets", _targets(tmp_path, "broken", broken), "--out", str(out)]) == 0
    progress = capsys.readouterr().err
    assert progress.count("FAIL (the turn failed: Could not load the model from") == 2, progress
    runs = json.loads(out.read_text())["runs"]
    assert all(run["error"].startswith("Could not load the model") and not run["passed"] for run in runs)


def test_unusable_input_exits_with_2_and_says_why(tmp_path, capsys):
    eval_set = tmp_path / "bad.yaml"
    eval_set.write_text("name: x\ncases: []\n")
    assert main(["--set", str(eval_set)]) == 2
    assert "List should have at least 1 item" in capsys.readouterr().err


def test_a_model_judged_check_asks_the_judge_target_and_is_marked(tmp_path, capsys):
    judge = build_scripted_model(tmp_path / "judge", ['{"meets": true, "reason": "it names 391"}'])
    answerer = build_scripted_model(tmp_path / "answerer", ["It", " is", " 391", "."])
    eval_set = tmp_path / "judged.yaml"
    eval_set.write_text("""
name: Judged
cases:
  - name: multiplies
    messages: [{role: user, content: "What is 17 * 23?"}]
    checks:
      - {type: judge, judge: the judge, rubric: Gives 391.}
""")
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": [
        {"label": "the model", "model": {"backend": "hf", "path": str(answerer), "device": "cpu", "dtype": "float32"}},
        {"label": "the judge", "model": {"backend": "hf", "path": str(judge), "device": "cpu", "dtype": "float32"}}]}))
    out = tmp_path / "judged.json"
    assert main(["--set", str(eval_set), "--targets", str(targets), "--out", str(out)]) == 0
    runs = {run["target"]: run for run in json.loads(out.read_text())["runs"]}
    (check,) = runs["the model"]["checks"]
    assert check == {"type": "judge", "passed": True, "detail": "the judge says: it names 391", "model_judged": True}
    assert json.loads(out.read_text())["summary"][0]["model_judged_checks"] == 1
