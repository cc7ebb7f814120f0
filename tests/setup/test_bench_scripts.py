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


def test_the_page_speed_benchmark_measures_the_chat_page(browser):
    """bench/page_speed.py --quick in Chromium (it launches its own; the `browser` fixture marks this test as a
    browser test and skips it where Chromium is missing): a row of figures for each conversation size."""
    done = subprocess.run([sys.executable, "-m", "bench.page_speed", "--quick", "--max-tokens", "8"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(at for at, line in enumerate(lines) if "import+render s" in line)  # the table, after the progress
    assert all(column in lines[header] for column in ("send drawn s", "page tok/s", "model tok/s", "reload full s"))
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 1:] if line.split()[:1] in (["1"], ["5"])}
    assert set(rows) == {"1", "5"}, done.stdout
    for figures in rows.values():
        assert len(figures) == 7 and all(float(value) >= 0 for value in figures), done.stdout  # no nan, no gap
        assert float(figures[0]) > 0 and float(figures[1]) > 0 and float(figures[3]) > 0  # import, send, model tok/s
