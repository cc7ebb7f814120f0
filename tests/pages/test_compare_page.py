"""The Compare page in AppTest (tiny random model, a SQLite file per test): a new session finds two targets ready
and can send at once; every pane answers; the blind vote is stored with the targets and the prompt and lands in
the leaderboard; three targets make pairwise votes; a pane's conversation continues in Chat, saved in the
history, with that target's settings; tool calls that wait for approval are decided per pane while the other waits;
a target that would not fit in memory is refused with the figures, before anything loads; bad targets stop the
message box with the reason.

Streaming at once and Stop in one pane are shown in Chromium (tests/browser/test_compare_browser.py) and, exactly, by
the runner's tests (tests/unit/test_compare_runner.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.frontends.streamlit.client_cache import PICKER, process_pool
from app.storage import CompareVoteStore, ConversationStore
from tests.helpers import COMPARE_PAGE, open_app

PAGE = "compare"


@pytest.fixture
def app(monkeypatch, tiny_model_dir, database):
    monkeypatch.delenv("DEMO_COMPARE_TARGETS", raising=False)
    with open_app(monkeypatch, tiny_model_dir, page=COMPARE_PAGE, timeout=180) as at:
        for slot in range(2):
            at.number_input(key=f"settings.compare.target{slot}.max_new_tokens").set_value(12)
        at.run()
        yield at
        process_pool().close()


def send(at: AppTest, text: str = "Say hello") -> None:
    at.chat_input(key="compare_input").set_value(text).run()
    assert not at.exception, at.exception


def pane_headers(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**") and m.value.endswith("**")
            and m.value not in ("**Targets**", "**Loaded models**", "**Tool calls**",
                                "**Save the settings as a preset**")
            and not m.value.startswith("**Which")]


def votes(database: ConversationStore) -> CompareVoteStore:
    return CompareVoteStore(database.engine)


def test_a_new_session_finds_two_targets_ready_and_a_blind_vote_lands_in_the_leaderboard(app, database):
    labels = [app.text_input(key=f"settings.compare.target{slot}.label").value for slot in range(2)]
    model = "tiny-model0 (hf)"  # the labels name the model: the leaderboard counts votes by label
    assert labels == [f"{model} · its defaults (temperature 0.7)", f"{model} · temperature 1"]
    assert not app.chat_input(key="compare_input").disabled
    send(app, "Say hello")
    assert sorted(pane_headers(app)) == ["**A**", "**B**"]  # blind: letters only
    user_bubbles = [m for m in app.chat_message if m.avatar == "user" or m.name == "user"]
    assert len(user_bubbles) == 2  # the same message in both panes
    assert [c.value for c in app.caption if c.value.startswith(":material/timer: Turn:")].__len__() == 2
    # Both share the one loaded engine: only the picker's model is listed, once.
    loaded = [c.value for c in app.caption if "shared with every page" in c.value]
    assert len(loaded) == 1

    app.button(key="compare_vote/A").click().run()
    assert not app.exception
    (notice,) = app.success
    assert notice.value.startswith("Vote stored: A better.")
    headers = pane_headers(app)
    assert sorted(h[:5] for h in headers) == ["**A ·", "**B ·"]  # revealed
    winner = next(h for h in headers if h.startswith("**A ·")).removeprefix("**A · ").removesuffix("**")
    (stored,) = votes(database).list("local")
    assert stored.verdict == "a" and stored.labels[0] == winner and set(stored.labels) == set(labels)
    assert stored.prompt == "Say hello"
    assert stored.targets[0]["settings"]["settings"]["backend"] == "hf"
    assert "api_key" not in json.dumps(stored.targets)
    assert stored.metrics[0]["completion_tokens"] > 0
    assert not any(b.key.startswith("compare_vote/") for b in app.button)  # one vote per turn

    (board,) = app.dataframe
    table = board.value
    assert list(table["target"]) == [winner, next(label for label in labels if label != winner)]
    assert list(table["games"]) == [1, 1] and list(table["wins"]) == [1, 0]
    downloads = [element for element in app.get("download_button") if element.key.startswith("compare_")]
    assert len(downloads) == 4


def test_three_targets_vote_the_best_one_as_pairwise_wins(app, database):
    app.button(key="compare_add_target").click().run()
    app.number_input(key="settings.compare.target2.max_new_tokens").set_value(8).run()
    assert app.text_input(key="settings.compare.target2.label").value == "tiny-model0 (hf) · target 3"
    send(app)
    assert sorted(pane_headers(app)) == ["**A**", "**B**", "**C**"]
    app.button(key="compare_vote/B").click().run()
    stored = votes(database).list("local")
    assert len(stored) == 2 and {v.verdict for v in stored} == {"a"}
    assert len({v.labels[0] for v in stored}) == 1  # B's target won both of its pairs
    app.button(key="compare_new").click().run()
    assert not pane_headers(app) or all("·" not in h for h in pane_headers(app))
    assert not [m for m in app.chat_message]


def test_a_pane_continues_in_chat_with_its_target_settings_saved_in_the_history(app, database):
    app.toggle(key="settings.compare.blind").set_value(False).run()
    send(app, "Tell me something")
    assert sorted(pane_headers(app)) == ["**tiny-model0 (hf) · its defaults (temperature 0.7)**",
                                         "**tiny-model0 (hf) · temperature 1**"]
    answer = [m for m in app.chat_message if m.name == "assistant"][1].markdown[0].value
    app.button(key="compare_continue/1").click().run()
    assert not app.exception
    (entry,) = database.list("local", page="chat")
    stored = database.get("local", entry.id)
    assert [m.role for m in stored.messages] == ["user", "assistant"]
    assert stored.messages[0].content == "Tell me something"
    assert app.slider(key="temperature").value == 1.0  # the target's settings came along
    assert app.number_input(key="max_new_tokens").value == 12
    bubbles = app.chat_message
    assert bubbles[0].markdown[0].value == "Tell me something" and bubbles[1].markdown[0].value == answer


def test_calls_that_wait_for_approval_are_decided_per_pane(app, database):
    app.toggle(key="settings.compare.tools").set_value(True).run()
    for slot in range(2):
        app.selectbox(key=f"settings.compare.target{slot}.tool_choice").set_value("count_words")
        app.number_input(key=f"settings.compare.target{slot}.max_new_tokens").set_value(60)  # a whole call
        app.number_input(key=f"settings.compare.target{slot}.temperature").set_value(0.0)  # as the Tools tests
    app.toggle(key="settings.compare.blind").set_value(False).run()
    assert app.selectbox(key=f"_run_policy/{PAGE}/count_words").value == "ask"
    send(app, "Count the words of this sentence")
    assert {b.key for b in app.button} >= {"compare_run/0", "compare_deny/0", "compare_run/1", "compare_deny/1"}
    app.button(key="compare_run/0").click().run()
    assert not app.exception
    assert "compare_run/0" not in {b.key for b in app.button}
    assert "compare_run/1" in {b.key for b in app.button}  # the other pane still waits
    app.button(key="compare_deny/1").click().run()
    assert not app.exception
    (strip,) = [frame for frame in app.dataframe if "parsed" in frame.value.columns]
    rows = strip.value
    assert list(rows["parsed"]) == [True, True] and list(rows["schema"]) == [True, True]
    assert list(rows["status"]) == ["ok", "denied"] or list(rows["status"]) == ["failed", "denied"]
    cards = [card.label for bubble in app.chat_message for card in bubble.status]
    # It ran: its own result (the tiny model's random text may be blank, which the tool refuses)
    assert len(cards) == 2 and "declined" not in cards[0] and cards[1].startswith("count_words · declined")


def test_run_is_decided_by_the_tools_policy_at_the_click_not_at_the_turns_start(app, database):
    """A call waits (count_words set to Ask); the user then sets count_words to Never: Run refuses it, nothing runs,
    and the call can still be denied."""
    app.toggle(key="settings.compare.tools").set_value(True).run()
    for slot in range(2):
        app.selectbox(key=f"settings.compare.target{slot}.tool_choice").set_value("count_words")
        app.number_input(key=f"settings.compare.target{slot}.max_new_tokens").set_value(60)  # a whole call
        app.number_input(key=f"settings.compare.target{slot}.temperature").set_value(0.0)
    app.toggle(key="settings.compare.blind").set_value(False).run()
    send(app, "Count the words of this sentence")
    assert "compare_run/0" in {b.key for b in app.button}
    app.selectbox(key=f"_run_policy/{PAGE}/count_words").set_value("never").run()
    app.button(key="compare_run/0").click().run()
    assert not app.exception
    assert any("count_words is set never to run" in w.value for w in app.warning), [w.value for w in app.warning]
    assert not [card for bubble in app.chat_message for card in bubble.status]  # no call ran
    assert {"compare_run/0", "compare_deny/0"} <= {b.key for b in app.button}  # still waiting
    app.toggle(key="settings.compare.tools").set_value(False).run()  # tools off altogether: refused too
    app.button(key="compare_run/0").click().run()
    assert any("count_words is not switched on now" in w.value for w in app.warning)
    app.button(key="compare_deny/0").click().run()
    assert not app.exception
    cards = [card.label for bubble in app.chat_message for card in bubble.status]
    assert len(cards) == 1 and cards[0].startswith("count_words · declined")


def test_a_target_that_would_not_fit_in_memory_is_refused_with_the_figures(app, tmp_path: Path):
    huge = tmp_path / "huge-model"
    huge.mkdir()
    (huge / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "float32"}))
    with open(huge / "model.safetensors", "wb") as weights:  # sparse: 4 TB that take no disk
        weights.truncate(4 * 10**12)
    app.text_input(key="settings.compare.target1.model_path").set_value(str(huge)).run()
    send(app)
    (error,) = app.error
    assert "would not fit" in error.value and "needs about 4800 GB of RAM" in error.value and "is free" in error.value
    assert not pane_headers(app) or not [m for m in app.chat_message]  # nothing was sent
    pool = process_pool()
    assert all(pool.holds(PICKER, loaded) for loaded in pool.loaded())  # nor loaded: the picker's model only


def test_targets_that_cannot_be_used_stop_the_message_box_with_the_reason(app):
    first = app.text_input(key="settings.compare.target0.label").value
    app.text_input(key="settings.compare.target1.label").set_value(first).run()
    assert app.chat_input(key="compare_input").disabled
    assert any("used twice" in w.value for w in app.warning)
    app.text_input(key="settings.compare.target1.label").set_value("Hot").run()
    app.selectbox(key="settings.compare.target1.backend").set_value("openai").run()
    app.text_input(key="settings.compare.target1.api_base_url").set_value("ftp://nowhere").run()
    assert app.chat_input(key="compare_input").disabled
    assert any("http(s) URL" in w.value for w in app.warning)


def test_a_typed_api_url_on_this_machine_is_refused_while_the_app_serves_the_network(app, monkeypatch):
    """Served beyond loopback, a visitor's URL must pass the web guard: no probing of this machine's ports."""
    from streamlit import config as st_config

    monkeypatch.setattr(st_config, "get_option", lambda name, real=st_config.get_option:
                        "0.0.0.0" if name == "server.address" else real(name))
    app.selectbox(key="settings.compare.target1.backend").set_value("openai").run()
    app.text_input(key="settings.compare.target1.api_base_url").set_value("http://127.0.0.1:5432/v1").run()
    assert app.chat_input(key="compare_input").disabled
    assert any("reachable from other machines" in w.value for w in app.warning)


def test_a_target_whose_model_does_not_load_fails_in_its_pane_and_the_other_answers(app, tmp_path: Path):
    app.toggle(key="settings.compare.blind").set_value(False).run()
    app.text_input(key="settings.compare.target1.model_path").set_value(str(tmp_path / "no-such-model")).run()
    send(app)
    assert not app.exception
    (error,) = app.error
    assert "no-such-model" in error.value
    answers = [m for m in app.chat_message if m.name == "assistant"]
    assert len(answers) == 1 and answers[0].markdown  # the other target answered
    send(app, "And again")  # the page goes on: the failed pane tries its model again
    assert len(app.error) == 1 and len([m for m in app.chat_message if m.name == "assistant"]) == 2


def test_a_targets_tool_choice_naming_a_tool_that_is_off_is_kept_and_its_pane_says_so(app):
    app.toggle(key="settings.compare.blind").set_value(False).run()
    app.toggle(key="settings.compare.tools").set_value(True).run()
    app.selectbox(key="settings.compare.target1.tool_choice").set_value("calculator").run()
    app.toggle(key="settings.compare.tools").set_value(False).run()  # the tools go off: the choice stays
    assert app.selectbox(key="settings.compare.target1.tool_choice").value == "calculator"
    send(app)
    (error,) = app.error
    assert "tool_choice 'calculator' names a tool that is not on" in error.value
    assert len([m for m in app.chat_message if m.name == "assistant"]) == 1  # the other target answered


def test_a_collection_chosen_for_a_comparison_gives_every_target_the_same_passages(app, database):
    from app.frontends.streamlit.knowledge_page import COMPARE_CHOSEN
    from app.knowledge.ingest import add_file
    from app.storage.knowledge import KnowledgeStore
    from tests.knowledge_fixtures import FACTS

    knowledge = KnowledgeStore(database.engine)
    collection = knowledge.create_collection("local", "Local history")
    add_file(knowledge, "local", collection.id, "notes.md", "\n\n".join(
        [FACTS[37][0], "The mill burned down in 1902.", "Sheep were sold at the fair."]).encode())
    app.run()  # the collection is offered once it exists
    app.multiselect(key=COMPARE_CHOSEN).set_value([collection.id]).run()
    send(app, FACTS[37][1])
    compare = app.session_state["_compare_session"]
    questions = [pane.conversation.messages[0] for pane in compare.panes]
    for question in questions:  # each pane's copy: the collection, and the passages searched once for both
        assert [attachment.kind for attachment in question.attachments] == ["document", "passages"]
        assert "Marigold" in question.prompt_text()
    assert questions[0].attachments[1].sources == questions[1].attachments[1].sources
    assert questions[0].attachments[1].sources[0].document == "notes.md"
    shown = [str(expander.label) for expander in app.expander if "Sources:" in str(expander.label)]
    assert len(shown) == 2 and all("1 passage from notes.md" in label for label in shown), shown

    app.multiselect(key=COMPARE_CHOSEN).set_value([]).run()  # the comparison goes on searching what it chose
    send(app, "When did the mill burn down?")
    follow_ups = [pane.conversation.messages[2] for pane in compare.panes]
    assert all(message.attachments and message.attachments[-1].kind == "passages" for message in follow_ups)
    assert "1902" in follow_ups[0].attachments[-1].sources[0].text
    assert follow_ups[0].attachments == follow_ups[1].attachments


def test_chosen_collections_that_cannot_be_read_are_said_to_be_missing(app, database, monkeypatch):
    from app.frontends.streamlit.knowledge_page import COMPARE_CHOSEN
    from app.storage.errors import StorageError
    from app.storage.knowledge import KnowledgeStore

    knowledge = KnowledgeStore(database.engine)
    collection = knowledge.create_collection("local", "Local history")
    app.run()
    app.multiselect(key=COMPARE_CHOSEN).set_value([collection.id]).run()

    def unreachable(*args, **kwargs):
        raise StorageError("the database went away")

    monkeypatch.setattr(KnowledgeStore, "collections", unreachable)
    send(app, "Which ship carried the telegraph wire?")
    said = " ".join(str(warning.value) for warning in app.warning)
    assert "The collections you chose could not be searched for this question (the database went away)" in said
    compare = app.session_state["_compare_session"]
    assert all(pane.conversation.messages[0].attachments == [] for pane in compare.panes)
    assert all(pane.conversation.messages[-1].role == "assistant" for pane in compare.panes)  # answered anyway


def test_the_leaderboard_counts_the_thumbs_answers_got_in_conversations_per_model(app, database):
    from app.domain.conversation import Feedback, Message

    for model, ratings in (("Qwen2.5-7B-Instruct", ["up", "up", "down"]), ("SmolLM2-135M-Instruct", ["down"])):
        for rating in ratings:
            made = database.create("local", "chat")
            database.append("local", made, Message("user", "Hello"))
            database.append("local", made, Message("assistant", "Hi", model=model,
                                                   feedback=Feedback(rating, "short" if rating == "down" else "")))
    database.append("local", database.create("local", "chat"), Message("assistant", "Not rated", model="Other"))
    app.run()
    (thumbs,) = app.dataframe
    table = thumbs.value
    assert list(table["model"]) == ["Qwen2.5-7B-Instruct", "SmolLM2-135M-Instruct"]
    assert list(table["👍"]) == [2, 0] and list(table["👎"]) == [1, 1] and list(table["% up"]) == [67, 0]
    assert list(table["with a comment"]) == [1, 1]
