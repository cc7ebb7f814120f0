"""The All Tools page through AppTest with the real SmolLM2: the model runs Python and a plot appears."""

from __future__ import annotations

import pytest

from tests.helpers import ALL_TOOLS_PAGE, open_app


@pytest.fixture
def app(monkeypatch, smollm2_dir):
    monkeypatch.delenv("DEMO_IMAGE_API_URL", raising=False)
    with open_app(monkeypatch, smollm2_dir, page=ALL_TOOLS_PAGE, timeout=240, temperature=0.0,
                  max_new_tokens=300) as at:
        yield at


def test_the_page_offers_session_tools_and_says_what_the_sandbox_promises(app):
    options = app.selectbox(key="settings.all_tools.choice").options
    assert {"python", "web_search", "open_url", "mclick", "calculator"} <= set(options)
    assert "generate_image" not in options  # not configured
    about = next(e for e in app.expander if e.label.startswith("What the tools can do"))
    text = "".join(m.value for m in about.markdown)
    assert "a bubblewrap sandbox" in text and "cannot see the app's files" in text and "DEMO_IMAGE_API_URL" in text
    assert app.button(key="restart_kernel")


def test_smollm2_runs_python_and_the_plot_appears(app):
    app.selectbox(key="settings.all_tools.choice").set_value("python").run()
    app.chat_input(key="all_tools_input").set_value("Plot [3, 1, 4, 1, 5, 9, 2, 6] with matplotlib.").run()
    assert not app.exception
    user, assistant = app.chat_message
    card = assistant.status[0]
    assert card.label.startswith("python → ") and "failed" not in card.label
    assert "import matplotlib" in card.code[0].value and card.code[0].language == "python"
    assert "[Figure 1 was displayed to the user.]" in card.code[1].value
    images = assistant.get("image")
    assert len(images) == 1  # the plot, in the chat under its card


def test_without_a_sandbox_the_page_says_why_and_offers_no_python(monkeypatch, tiny_model_dir, tmp_path):
    from app.tools.sandbox import isolation

    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without bubblewrap
    isolation._bubblewrap_works.cache_clear()
    try:
        with open_app(monkeypatch, tiny_model_dir, page=ALL_TOOLS_PAGE) as at:
            assert "python" not in at.selectbox(key="settings.all_tools.choice").options
            warning = at.warning[0].value
            assert warning.startswith("The Python tool is off.") and "apt-get install bubblewrap" in warning
            assert all(button.key != "restart_kernel" for button in at.button)
    finally:
        isolation._bubblewrap_works.cache_clear()
