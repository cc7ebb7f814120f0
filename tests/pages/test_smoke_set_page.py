"""First answers that make sense: every everyday question of tests/data/smoke_set.json asked on the Chat page in
Streamlit's AppTest, with the sidebar as a new user finds it (the embedded SmolLM2, its model-card sampling) and
only the seed fixed, as tests/browser/test_smoke_set.py asks the first of them in Chromium. The page's script,
sidebar and turn are the ones the browser gets; here they run without Chromium, in the first phase of `make test`.
Every answer ends by itself (never cut at max new tokens, the mark of a repetition loop) and contains the expected
fact. bench/smoke_set.py measures the same set over many seeds."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_smoke_set import SEED, SMOKE_SET
from tests.helpers import open_app


@pytest.fixture(scope="module")
def chat(smollm2_dir):
    with pytest.MonkeyPatch.context() as monkeypatch, open_app(monkeypatch, smollm2_dir, timeout=300) as at:
        at.number_input(key="seed").set_value(int(SEED)).run()
        yield at


@pytest.mark.parametrize("item", SMOKE_SET, ids=[item["turns"][-1][:40] for item in SMOKE_SET])
def test_everyday_question(chat, item):
    chat.button(key="history_new").click().run()  # a new conversation, with the sidebar's settings kept
    assert any("temperature 0.2, top p 0.9 (SmolLM2 model card)" in c.value for c in chat.sidebar.caption)
    for text in item["turns"]:
        chat.chat_input(key="chat_input").set_value(text).run()
        assert not chat.exception
    answer = chat.chat_message[-1]
    assert answer.name == "assistant" and len(chat.chat_message) == 2 * len(item["turns"])
    content = "".join(md.value for md in answer.markdown)
    metrics = " ".join(caption.value for caption in answer.caption)
    assert "tok/s" in metrics and "cut at max new tokens" not in metrics, f"ran to the token limit: {content[:300]!r}"
    assert re.search(item["expect"], content, re.IGNORECASE), f"expected /{item['expect']}/ in {content[:300]!r}"
