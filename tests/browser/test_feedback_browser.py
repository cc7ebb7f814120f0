"""Thumbs and a comment on an answer in Chromium, as a person gives them: the tiny model answers, the person
rates it down and says why, and after a refresh the conversation comes back from its URL with the thumb and the
comment shown, stored with the answer and counted for the model that wrote it."""

from __future__ import annotations

import os

from playwright.sync_api import expect

from tests.helpers import ask, model_loaded, set_number, streamlit_app


def test_thumbs_and_a_comment_on_an_answer_are_stored_shown_after_a_refresh_and_counted(tiny_model_dir, browser,
                                                                                        tmp_path):
    from app.domain.conversation import Feedback
    from app.storage import ConversationStore, open_database
    from app.storage.feedback import FeedbackStore

    database_url = f"sqlite:///{tmp_path}/conversations.db"
    env = {**os.environ, "DEMO_MODEL": str(tiny_model_dir), "HF_HUB_OFFLINE": "1", "DEMO_DATABASE_URL": database_url}
    with streamlit_app(env, "streamlit-feedback.log") as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(url)
        model_loaded(page, model="tiny-model")
        set_number(page, "Max new tokens", "8")
        answer = ask(page, "Hello", 1)
        answer.get_by_role("radio", name="Thumbs down").click()
        comment = answer.get_by_role("button", name="Comment")
        expect(comment).to_be_visible(timeout=30_000)
        comment.click()
        page.get_by_label("What was good or wrong?").fill("Eight tokens of nothing")
        page.get_by_role("button", name="Save the comment").click()
        expect(page.get_by_text("Saved your comment.")).to_be_visible(timeout=30_000)

        page.reload()  # the conversation comes back from the URL, the thumb with it
        answer = page.locator('[data-testid="stChatMessage"]').nth(1)
        expect(answer.get_by_role("button", name="Your comment")).to_be_visible(timeout=60_000)
        expect(answer.get_by_role("radio", name="Thumbs down")).to_have_attribute("aria-checked", "true")
        expect(answer.get_by_role("radio", name="Thumbs up")).to_have_attribute("aria-checked", "false")
        engine = open_database(database_url)
        try:
            (entry,) = ConversationStore(engine).list("local")
            stored = ConversationStore(engine).get("local", entry.id).messages[1]
            assert stored.feedback == Feedback("down", "Eight tokens of nothing")
            (count,) = FeedbackStore(engine).counts("local")
            assert (count.model, count.up, count.down, count.comments) == (stored.model, 0, 1, 1)
        finally:
            engine.dispose()
        page.close()
