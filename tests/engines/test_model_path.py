"""Which model folder a model path names (one rule: empty means the embedded model), the local backends' check of
it, and the backend registry loading each engine only when it is chosen."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from app.clients.backends import BACKENDS, create_client
from app.clients.client_protocol import ClientError
from app.clients.embedded_model import embedded_model_dir, is_embedded, model_folder
from app.clients.model_path import resolve_model_path
from app.config import ModelSettings

ROOT = Path(__file__).resolve().parents[2]


def test_an_empty_path_names_the_embedded_model_and_any_other_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert is_embedded("") and is_embedded("  \n") and not is_embedded("m")
    assert model_folder("") == model_folder(" ") == embedded_model_dir()
    assert model_folder(" ~/models/m ") == tmp_path / "models" / "m"


def test_a_local_backend_refuses_a_missing_folder_and_one_without_config_json(tmp_path):
    with pytest.raises(ClientError, match="does not exist"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ClientError, match="no config.json"):
        resolve_model_path(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(f" {tmp_path} ") == tmp_path


def test_the_vllm_backend_does_not_import_the_transformers_backend():
    # A fresh interpreter: this one may have imported app.clients.hf for other tests. vllm.py imports vLLM itself
    # only when a client starts, so this holds with or without vLLM installed.
    script = "import sys, app.clients.vllm; print(sorted(m for m in sys.modules if m.startswith('app.clients.hf')))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_every_registered_backend_names_its_client_class():
    for name, backend in BACKENDS.items():
        module, _, class_name = backend.client.partition(":")
        assert getattr(importlib.import_module(module), class_name).backend == name
    with pytest.raises(ClientError, match="Unknown backend 'nope'; choose one of: hf, vllm, llamacpp, openai"):
        create_client(ModelSettings(backend="nope"))
