from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from app.embedded_model import ensure_embedded_model

    return ensure_embedded_model()


@pytest.fixture(scope="session")
def tiny_client(tiny_model_dir: Path):
    from app.clients.hf import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(model_path=str(tiny_model_dir), device="cpu"))


@pytest.fixture(scope="session")
def smol_client(smollm2_dir: Path):
    from app.clients.hf import HFClient
    from app.config import ModelSettings

    return HFClient(ModelSettings(model_path=str(smollm2_dir), device="cpu"))
