"""First answers that make sense: the first everyday question of tests/data/smoke_set.json asked on the Chat page
in Chromium, with the sidebar as a new user finds it (the embedded SmolLM2, its model-card sampling). Only the seed is
fixed, so a run can be repeated. The answer ends by itself (never cut at max new tokens, the mark of a repetition
loop) and contains the expected fact; its screenshot is kept in test-artifacts/. tests/pages/test_smoke_set_page.py
asks every question of the set through the same page script without Chromium (about 8 s each instead of 35 on a
2-core machine); bench/smoke_set.py measures the set over many seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import ARTIFACTS, ask, open_chat

SMOKE_SET = json.loads((Path(__file__).parent.parent / "data" / "smoke_set.json").read_text())["conversations"]
SEED = "1"  # bench/smoke_set.py: with the model defaults, every answer of this seed is right


@pytest.mark.parametrize("item", SMOKE_SET[:1], ids=[item["turns"][-1][:40] for item in SMOKE_SET[:1]])
def test_everyday_question(app_url, browser, item):
    page = open_chat(browser, app_url, SEED)
    # The values in use are on view, with where they come from.
    page.get_by_test_id("stSidebar").get_by_text("temperature 0.2, top p 0.9 (SmolLM2 model card)").wait_for(
        timeout=10_000)
    try:
        for turn, text in enumerate(item["turns"]):
            answer = ask(page, text, 2 * turn + 1)
        shown = answer.inner_text()
        metrics = next(line for line in shown.splitlines() if "tok/s" in line)
        content = "\n".join(line for line in shown.splitlines() if line != metrics)
        if item is SMOKE_SET[0]:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "smoke-first-answer.png"), full_page=False)
        assert "cut at max new tokens" not in metrics, f"ran to the token limit: {content[:300]!r}"
        assert re.search(item["expect"], content, re.IGNORECASE), f"expected /{item['expect']}/ in {content[:300]!r}"
    finally:
        page.close()
