"""The model picker's list of the models on this machine, through AppTest: a folder named in DEMO_MODEL_DIRS holds
a real model folder (the tiny model) and a GGUF; picking the folder sets the path and the engine, loads it, and
says what it is and whether it fits before anything else happens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.frontends.streamlit.model_library import MODEL_PATH, PICKED
from tests.helpers import open_app
from tests.model_fixtures import write_gguf


@pytest.fixture
def library(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "library"
    shutil.copytree(tiny_model_dir, folder / "Tiny-Folder")  # another model than the one loaded at first
    write_gguf(folder / "someone" / "Tiny-GGUF" / "tiny-Q8_0.gguf", name="Tiny GGUF")
    monkeypatch.setenv("DEMO_MODEL_DIRS", str(folder))
    return folder


def captions(app) -> str:
    return "\n".join(caption.value for caption in app.caption)


def test_a_model_found_on_this_machine_is_picked_described_and_loaded(monkeypatch, library, tiny_model_dir):
    with open_app(monkeypatch, tiny_model_dir) as app:
        picker = app.selectbox(key=PICKED)
        labels = picker.options
        assert any(label.startswith("Tiny-Folder · safetensors") and "library" in label for label in labels), labels
        assert any(label.startswith("Tiny GGUF · GGUF Q8_0") for label in labels), labels
        # The model loaded now (DEMO_MODEL) is described before any message: its facts and its fit.
        shown = captions(app)
        assert "safetensors · " in shown and "context 4,096" in shown, shown
        assert "of RAM" in shown and "KV cache" in shown and "fits in the" in shown, shown

        picker.set_value(str(library / "Tiny-Folder")).run()
        assert not app.exception
        assert app.session_state[MODEL_PATH] == str(library / "Tiny-Folder")
        assert app.session_state["backend"] == "hf"
        assert "Tiny-Folder" in captions(app)  # the page names the model it loaded

        # A path typed afterwards: the list no longer claims to show it.
        app.text_input(key=MODEL_PATH).set_value(str(tiny_model_dir)).run()
        assert app.selectbox(key=PICKED).value is None and not app.exception


def test_a_model_that_would_not_fit_is_flagged_before_it_loads(monkeypatch, library, tiny_model_dir):
    monkeypatch.setenv("DEMO_MAX_CONTEXT", str(2_000_000_000))  # its KV cache alone: about 1 TB
    with open_app(monkeypatch, tiny_model_dir) as app:
        warnings = " ".join(warning.value for warning in app.warning)
        assert "does not fit in the" in warnings and "2,000,000,000 tokens" in warnings, warnings
        assert "pick a smaller model" in warnings
