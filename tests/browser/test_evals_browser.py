"""From a chat to an eval in Chromium, as a person does it: the tiny model answers, the person opens the answer's
trace (the turn and its model call on a timeline, drawn from memory with no collector), keeps the turn as a test
case with a token limit, finds it in its set on the Evals page, and runs the set there: the run is stored with the
set, passing."""

from __future__ import annotations

import os
import re

from playwright.sync_api import expect

from tests.helpers import ask, model_loaded, open_popover, readme_screenshot, set_number, streamlit_app


def test_a_turn_saved_as_a_test_case_appears_in_its_set_and_runs_and_its_trace_shows(tiny_model_dir, browser,
                                                                                     tmp_path):
    from app.storage import open_database
    from app.storage.eval_sets import EvalSetStore

    database_url = f"sqlite:///{tmp_path}/conversations.db"
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1", "DEMO_DATABASE_URL": database_url}
    with streamlit_app(env, "streamlit-evals.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(url)
        model_loaded(page, model="tiny-model")
        set_number(page, "Max new tokens", "8")
        answer = ask(page, "Hello there", 1)

        timeline = page.get_by_test_id("stPopoverBody").filter(has=page.get_by_test_id("stVegaLiteChart"))
        open_popover(page, answer.get_by_role("button", name="Trace"), timeline)
        expect(timeline.get_by_test_id("stVegaLiteChart")).to_be_visible(timeout=30_000)
        expect(timeline.get_by_text("OpenTelemetry GenAI spans")).to_be_visible()
        expect(timeline.get_by_test_id("stDataFrame").locator("canvas").first).to_be_visible(timeout=30_000)
        page.wait_for_timeout(500)  # the table's first paint
        readme_screenshot(page, "trace.png")
        page.keyboard.press("Escape")
        expect(timeline).to_be_hidden(timeout=10_000)

        form = page.get_by_test_id("stPopoverBody").filter(has=page.get_by_role("button", name="Save the test case"))
        open_popover(page, answer.get_by_role("button", name="Test case"), form)
        form.get_by_label("Eval set").fill("Greetings")
        form.get_by_label("Case name").fill("greets briefly")
        form.get_by_label("At most this many tokens (0: any)").fill("8")
        form.get_by_role("button", name="Save the test case").click()
        expect(page.get_by_text("Saved greets briefly in the eval set Greetings")).to_be_visible(timeout=30_000)
        page.keyboard.press("Escape")

        engine = open_database(database_url)
        try:
            stored = EvalSetStore(engine).get("local", "Greetings")
            assert stored is not None
            (case,) = stored.document["cases"]
            assert case["name"] == "greets briefly" and case["messages"] == [{"role": "user", "content": "Hello there"}]
            assert case["checks"] == [{"type": "max_tokens", "tokens": 8}] and case["sampling"]["max_new_tokens"] == 8

            page.goto(url.rstrip("/") + "/evals")
            expect(page.get_by_role("heading", name="Evals")).to_be_visible(timeout=60_000)
            expect(page.get_by_role("combobox", name="Eval set")).to_have_value("Greetings", timeout=30_000)
            page.get_by_role("button", name=re.compile("^Run on tiny-model")).click()
            expect(page.get_by_text("1 of 1 runs")).to_be_visible(timeout=120_000)
            expect(page.get_by_test_id("stDataFrame").nth(1)).to_be_visible(timeout=30_000)
            readme_screenshot(page, "evals.png")
            (run,) = EvalSetStore(engine).runs("local", "Greetings")
            (summary,) = run["summary"]
            assert summary["target"].startswith("tiny-model") and (summary["passed"], summary["runs"]) == (1, 1)
        finally:
            engine.dispose()
        page.close()
