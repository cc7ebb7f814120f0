"""The example eval set (examples/evals/smollm2.yaml) on the embedded SmolLM2, headless as `make eval` runs it: the
outcomes its comments promise, at temperature 0. The capital is named, the forced calculator call keeps to its
schema, the product of 17 and 23 comes out wrong; so the pass rate is 2 of 3 and its interval says how little
three runs prove."""

from __future__ import annotations

import json
from pathlib import Path

from app.evals.__main__ import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "evals" / "smollm2.yaml"


def test_the_example_set_has_its_known_outcomes_on_smollm2(smollm2_dir, tmp_path, capsys):
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": [{"label": "SmolLM2", "model": {
        "backend": "hf", "path": str(smollm2_dir), "device": "cpu"}}]}))
    out = tmp_path / "report.json"
    assert main(["--set", str(EXAMPLE), "--targets", str(targets), "--out", str(out)]) == 0  # no baseline
    report = json.loads(out.read_text())
    outcomes = {run["case"]: all(check["passed"] for check in run["checks"]) for run in report["runs"]}
    assert outcomes == {"names the capital of France": True, "calls the calculator when told to": True,
                        "multiplies two-digit numbers": False}, [(run["error"], run["answer"], run["checks"])
                                                                 for run in report["runs"]]
    (summary,) = report["summary"]
    assert (summary["passed"], summary["runs"]) == (2, 3)
    assert summary["ci_low"] < 0.67 < summary["ci_high"] and (summary["tool_calls"], summary["valid_tool_calls"]) \
        == (1, 1)
    assert summary["median_latency_s"] > 0 and summary["median_tokens"] > 0
    said, progress = capsys.readouterr()  # the runs as they end on stderr, the summary on stdout
    assert "SmolLM2 · multiplies two-digit numbers #1: FAIL (matches: no match for /\\b391\\b/)" in progress
    assert "SmolLM2: 67% (2/3" in said

    # The same run again, against the first as its baseline: nothing got worse, so nothing is named.
    assert main(["--set", str(EXAMPLE), "--targets", str(targets), "--out", str(tmp_path / "again.json"),
                 "--baseline", str(out)]) == 0
    assert "REGRESSION" not in capsys.readouterr().out
