"""The Models page through AppTest: offline by default (the library lists what is on disk and says how to allow
fetching; the Hub double on 127.0.0.1 receives nothing), and with DEMO_ALLOW_DOWNLOADS=1 a search, a repository's
choices with its licence, a download that finishes and checks out, and "Use for chat" setting the picker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.frontends.streamlit.model_library import MODEL_PATH
from tests.helpers import open_app
from tests.hub_double import HubDouble, HubRepo, huggingface_hub_pointed_at
from tests.model_fixtures import write_gguf

MODELS_PAGE = "frontends/streamlit/views/models.py"
REPO = "acme/Tiny-GGUF"


@pytest.fixture
def on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "library"
    write_gguf(folder / "someone" / "Local-GGUF" / "local-Q8_0.gguf", name="Local GGUF")
    monkeypatch.setenv("DEMO_MODEL_DIRS", str(folder))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return folder


@pytest.fixture
def hub_double(tmp_path: Path):
    double = HubDouble()
    gguf = write_gguf(tmp_path / "made" / "tiny.gguf", name="Tiny Hub GGUF").read_bytes()
    double.add(HubRepo(REPO, {"tiny-Q4_K_M.gguf": gguf, "tiny-Q8_0.gguf": gguf, "README.md": b"# tiny\n"},
                       card_data={"license": "llama3.2"}, tags=("gguf",), pipeline_tag="text-generation"))
    with double.serve() as url, huggingface_hub_pointed_at(url, cache_dir=tmp_path / "hub"):
        yield double


def _text(at) -> str:
    parts = [element.value for kind in ("markdown", "caption", "info", "success", "error", "warning")
             for element in getattr(at, kind)]
    return "\n".join(str(part) for part in parts)


def test_offline_the_page_lists_the_machine_s_models_and_contacts_nothing(monkeypatch, tiny_model_dir, on_disk,
                                                                       hub_double):
    monkeypatch.delenv("DEMO_ALLOW_DOWNLOADS", raising=False)
    with open_app(monkeypatch, tiny_model_dir, page=MODELS_PAGE) as at:
        table = at.dataframe[0].value
        assert "Local GGUF" in list(table["Model"]), table
        row = table[table["Model"] == "Local GGUF"].iloc[0]
        assert row["Format"].strip() == "GGUF Q8_0" and row["For"] == "chat" and row["Licence"] == "mit"
        shown = _text(at)
        assert "DEMO_ALLOW_DOWNLOADS=1" in shown and "ggml-org/Qwen3-1.7B-GGUF" in shown, shown
        assert not [button for button in at.button if button.label == "Open"]  # nothing to fetch with
        assert not [box for box in at.text_input if box.key == "models.search"]  # no search box either
    assert hub_double.requests == []


def test_a_search_opens_a_repository_and_its_download_is_used_for_chat(monkeypatch, tiny_model_dir, on_disk,
                                                                       hub_double, tmp_path):
    monkeypatch.setenv("DEMO_ALLOW_DOWNLOADS", "1")
    with open_app(monkeypatch, tiny_model_dir, page=MODELS_PAGE) as at:
        assert "127.0.0.1" in _text(at)  # it says what it will contact
        at.text_input(key="models.search").set_value("tiny").run()
        assert REPO in _text(at)
        at.button(key=f"open_found_{REPO}").click().run()
        choice = at.radio(key="models.choice")
        assert choice.value.endswith("tiny-Q4_K_M.gguf")  # the usual 4-bit middle is offered first
        assert len(choice.options) == 2
        download = at.button(key="models_download")
        assert download.disabled  # its licence is not one that allows any use: read and accept it first
        at.checkbox(key=f"models_ack_{REPO}").check().run()
        at.button(key="models_download").click().run()
        deadline = time.monotonic() + 60
        while "Done:" not in " ".join(str(bar.text) for bar in at.get("progress")) and time.monotonic() < deadline:
            time.sleep(0.2)
            at.run()
        assert not at.exception
        use = [button for button in at.button if button.label == "Use for chat"]
        assert use, _text(at)
        use[0].click().run()
        fetched = at.session_state[MODEL_PATH]
        assert fetched.endswith("tiny-Q4_K_M.gguf") and str(tmp_path / "hub") in fetched
        assert at.session_state["backend"] == "llamacpp"
        assert "The picker now loads" in _text(at)
        table = at.dataframe[0].value  # the fetched model is in the list, from the Hugging Face cache
        assert f"{REPO}/tiny-Q4_K_M.gguf" in list(table["Model"]), table

        # Deleted from the page: gone from disk and from the list; a model kept by another tool is not offered.
        at.selectbox(key="models.picked").set_value(fetched).run()
        at.button(key="models_delete").click().run()
        assert "Deleted acme/Tiny-GGUF/tiny-Q4_K_M.gguf" in _text(at) and not Path(fetched).exists()
        assert f"{REPO}/tiny-Q4_K_M.gguf" not in list(at.dataframe[0].value["Model"])
        local = str(on_disk / "someone" / "Local-GGUF" / "local-Q8_0.gguf")
        at.selectbox(key="models.picked").set_value(local).run()
        assert not [button for button in at.button if button.key == "models_delete"]
        assert "delete it there" in _text(at)
