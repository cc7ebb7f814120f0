"""Evals through the app (AppTest, tiny random model, a SQLite file per test): a turn saved as a test case from
under its answer lands in its set; the Evals page lists the set, runs it on the model with repeats, keeps the
report, and compares the next run with it; an answer rated down is offered as a case."""

from __future__ import annotations

import pytest

from app.domain.conversation import Conversation, Feedback, Message
from app.evals.library import stored_set
from app.storage.eval_sets import EvalSetStore
from tests.helpers import open_app

EVALS_PAGE = "frontends/streamlit/views/evals.py"


@pytest.fixture
def app(monkeypatch, tiny_model_dir, database):
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as at:
        yield at


def test_a_turn_saved_as_a_test_case_runs_on_the_evals_page(app, database):
    conversation = Conversation([Message("user", "What is 17 * 23?"), Message("assistant", "It is 391.")])
    app.session_state["conversation/chat"] = conversation
    app.run()
    case_name = next(w for w in app.text_input if w.label == "Case name")
    assert case_name.value == "What is 17 * 23?"
    case_name.input("multiplies")
    next(w for w in app.text_input if w.label == "Eval set").input("Arithmetic")
    next(w for w in app.number_input if w.label.startswith("At most this many tokens")).set_value(64)
    next(b for b in app.button if b.label == "Save the test case").click().run()
    assert not app.exception
    assert any("Saved **multiplies** in the eval set **Arithmetic**" in s.value for s in app.success)
    store = EvalSetStore(database.engine)
    (case,) = stored_set(store, "local", "Arithmetic")[0].cases
    assert case.question == "What is 17 * 23?" and [c.type for c in case.checks] == ["max_tokens"]

    app.switch_page(EVALS_PAGE).run()
    assert not app.exception
    assert app.selectbox(key="evals/chosen").value == "Arithmetic"
    app.number_input(key="evals/repeats").set_value(2)
    app.button(key="evals/run").click().run()
    assert not app.exception
    summary = app.dataframe[1].value  # the cases, then the run's summary
    assert list(summary["passed"]) == [2] and list(summary["runs"]) == [2]
    assert len(store.runs("local", "Arithmetic")) == 1
    app.button(key="evals/run").click().run()
    assert any("No case changed since the run before." in c.value for c in app.caption)
    assert len(store.runs("local", "Arithmetic")) == 2


def test_an_answer_rated_down_is_offered_and_added_as_a_case(app, database):
    made = database.create("local", "chat")
    database.append("local", made, Message("user", "Capital of Spain?"))
    database.append("local", made, Message("assistant", "Lisbon.", model="m", feedback=Feedback("down", "Madrid")))
    app.switch_page(EVALS_PAGE).run()
    app.text_input(key="evals/candidate_text/0").input("Madrid")
    app.text_input(key="evals/candidate_set/0").input("Capitals")
    next(b for b in app.button if b.label == "Add as a test case").click().run()
    assert not app.exception
    (case,) = stored_set(EvalSetStore(database.engine), "local", "Capitals")[0].cases
    assert case.question == "Capital of Spain?" and case.checks[0].text == "Madrid"
