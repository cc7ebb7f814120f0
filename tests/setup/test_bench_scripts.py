"""The benchmarks start as the README says (`python -m bench.NAME` from the project folder): each one's --help,
in a fresh interpreter, so an import that only works from the tests' own sys.path fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "timing")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_benchmark_starts_from_the_project_folder(name):
    done = subprocess.run([sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
