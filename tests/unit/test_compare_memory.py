"""Compare's memory accounting (app/clients/memory_fit.py): each backend's estimate from real files on disk (sparse
files of weight-file sizes, no model loaded), and check_fit refusing what cannot fit with the figures in its
message, counting shared settings once, loaded ones not at all, and never refusing remote or unknown needs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.clients import memory_fit as memory
from app.clients.embedded_model import gguf_path, is_converted, model_folder
from app.clients.memory_fit import DoesNotFit, check_fit, describe_bytes, free_bytes, need_for, total_bytes
from app.config import ModelSettings, VLLMOptions

MB = 10**6
GB = 10**9


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine has no GPU unless a test says so (the tests also stay clear of importing torch)."""
    monkeypatch.setattr(memory, "_cuda_available", lambda: False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # tests/conftest.py sets it for the vLLM tests


def with_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_cuda_available", lambda: True)


def sized(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (sparse): only its size is read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def model_dir(tmp_path: Path, stored: str | None = "bfloat16", weights: dict[str, int] | None = None,
              **config: object) -> Path:
    """A model folder: config.json (stored dtype as "torch_dtype", plus `config`) and weight files of these sizes
    (one 100 MB model.safetensors unless given)."""
    folder = tmp_path / "model"
    folder.mkdir()
    if stored:
        config["torch_dtype"] = stored
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **config}), encoding="utf-8")
    for name, size in ({"model.safetensors": 100 * MB} if weights is None else weights).items():
        sized(folder / name, size)
    return folder


def machine(ram: int | None = None, gpu: int | None = None) -> Callable[[str], int | None]:
    """A stand-in for free_bytes or total_bytes: these figures (None: not known)."""
    return lambda where: ram if where == "RAM" else gpu


# ----- estimates ----------------------------------------------------------------------------------------------------

def test_transformers_on_the_cpu_loads_16_bit_weights_in_float32_so_twice_their_size(tmp_path):
    folder = model_dir(tmp_path, "bfloat16")
    need = need_for(ModelSettings(backend="hf", model_path=str(folder), device="cpu"))
    assert (need.where, need.bytes) == ("RAM", int(100 * MB * 2 * 1.2))
    assert "100 MB" in need.detail and "bfloat16" in need.detail and "float32" in need.detail
    assert "estimate" in need.detail


def test_transformers_keeps_the_stored_size_when_loading_in_the_stored_dtype(tmp_path):
    folder = model_dir(tmp_path, "float16")
    need = need_for(ModelSettings(backend="hf", model_path=str(folder), device="cpu", dtype="float16"))
    assert need.bytes == int(100 * MB * 1.2)
    assert need.detail == "estimate: weights 100 MB in float16 ×1.2"


def test_transformers_reads_the_newer_dtype_key_and_an_explicit_float32(tmp_path):
    folder = model_dir(tmp_path, None, dtype="bfloat16")  # transformers 5 writes "dtype", not "torch_dtype"
    need = need_for(ModelSettings(backend="hf", model_path=str(folder), device="cpu", dtype="float32"))
    assert need.bytes == int(100 * MB * 2 * 1.2)


def test_transformers_auto_device_is_the_gpu_when_cuda_is_there_and_loads_bfloat16(tmp_path, monkeypatch):
    with_cuda(monkeypatch)
    folder = model_dir(tmp_path, "float32")
    need = need_for(ModelSettings(backend="hf", model_path=str(folder)))
    assert (need.where, need.bytes) == ("GPU", int(100 * MB * 0.5 * 1.2))
    assert need_for(ModelSettings(backend="hf", model_path=str(folder), device="cpu")).where == "RAM"


def test_transformers_counts_the_shards_an_index_names_and_safetensors_over_bin(tmp_path):
    folder = model_dir(tmp_path, "bfloat16", {"model-00001-of-00002.safetensors": 60 * MB,
                                              "model-00002-of-00002.safetensors": 40 * MB,
                                              "consolidated.safetensors": 100 * MB,  # a copy beside the shards
                                              "pytorch_model.bin": 100 * MB})
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                            "c": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    settings = ModelSettings(backend="hf", model_path=str(folder), device="cpu", dtype="bfloat16")
    assert need_for(settings).bytes == int(100 * MB * 1.2)


def test_transformers_counts_bin_weights_when_there_are_no_safetensors(tmp_path):
    folder = model_dir(tmp_path, "float16", {"pytorch_model.bin": 50 * MB})
    assert need_for(ModelSettings(model_path=str(folder), device="cpu", dtype="float16")).bytes == int(50 * MB * 1.2)


def test_a_quantized_model_is_not_rescaled_by_the_dtype(tmp_path):
    folder = model_dir(tmp_path, "float16", quantization_config={"quant_method": "awq"})
    need = need_for(ModelSettings(model_path=str(folder), device="cpu"))
    assert need.bytes == int(100 * MB * 1.2)
    assert "awq" in need.detail


def test_the_embedded_model_is_measured_from_its_converted_folder():
    folder = model_folder("")
    if not is_converted(folder):
        pytest.skip("the embedded model is not converted (make setup)")
    weights = (folder / "model.safetensors").stat().st_size
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    stored = config.get("torch_dtype") or config.get("dtype")
    need = need_for(ModelSettings(device="cpu", dtype=stored))
    assert need.where == "RAM" and need.bytes == int(weights * 1.2)
    assert need.model.startswith("SmolLM2-135M-Instruct")


def test_a_missing_folder_or_one_without_weights_cannot_be_told(tmp_path):
    for backend in ("hf", "vllm"):
        need = need_for(ModelSettings(backend=backend, model_path=str(tmp_path / "nowhere")))
        assert need.bytes is None and "not found" in need.detail
    empty = model_dir(tmp_path, "bfloat16", weights={})
    need = need_for(ModelSettings(model_path=str(empty), device="cpu"))
    assert need.bytes is None and "no *.safetensors" in need.detail


def test_llamacpp_takes_its_gguf_file_in_ram_unless_layers_go_to_a_gpu(tmp_path, monkeypatch):
    gguf = sized(tmp_path / "models" / "tiny.Q4_K_M.gguf", 200 * MB)
    sized(tmp_path / "models" / "mmproj-tiny.gguf", 50 * MB)  # a vision projector beside it is not the model
    for path in (gguf, gguf.parent):
        need = need_for(ModelSettings(backend="llamacpp", model_path=str(path)))
        assert (need.where, need.bytes) == ("RAM", int(200 * MB * 1.1))
        assert "200 MB" in need.detail
    offloaded = ModelSettings(backend="llamacpp", model_path=str(gguf), llamacpp_gpu_layers=-1)
    assert need_for(offloaded).where == "RAM"  # no CUDA: llama.cpp stays on the CPU
    with_cuda(monkeypatch)
    assert need_for(offloaded).where == "GPU"
    assert need_for(replace(offloaded, llamacpp_gpu_layers=0)).where == "RAM"


def test_llamacpp_missing_or_ambiguous_files_cannot_be_told(tmp_path):
    assert need_for(ModelSettings(backend="llamacpp", model_path=str(tmp_path / "x.gguf"))).bytes is None
    sized(tmp_path / "a.gguf", MB)
    sized(tmp_path / "b.gguf", MB)
    need = need_for(ModelSettings(backend="llamacpp", model_path=str(tmp_path)))
    assert need.bytes is None and "2 .gguf" in need.detail


def test_llamacpp_embedded_is_the_packaged_gguf():
    try:
        gguf = gguf_path()
    except Exception:
        pytest.skip("the embedded model package is not installed (make setup)")
    assert need_for(ModelSettings(backend="llamacpp")).bytes == int(gguf.stat().st_size * 1.1)


def test_vllm_on_a_cpu_reserves_its_share_of_ram(tmp_path):
    folder = model_dir(tmp_path)
    settings = ModelSettings(backend="vllm", model_path=str(folder))
    need = need_for(settings, total=machine(ram=20 * GB))
    assert (need.where, need.bytes) == ("RAM", int(0.3 * 20 * GB))
    assert "0.3" in need.detail and "20 GB" in need.detail
    chosen = replace(settings, vllm=VLLMOptions(gpu_memory_utilization=0.5))
    assert need_for(chosen, total=machine(ram=20 * GB)).bytes == 10 * GB
    assert need_for(settings, total=machine()).bytes is None


def test_vllm_on_a_cpu_with_an_explicit_kv_cache_takes_weights_plus_that_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    folder = model_dir(tmp_path, "float32")
    need = need_for(ModelSettings(backend="vllm", model_path=str(folder)), total=machine(ram=20 * GB))
    assert need.bytes == 50 * MB + 2 * 2**30  # "auto" loads float32 weights in 16 bits
    assert "VLLM_CPU_KVCACHE_SPACE" in need.detail


def test_vllm_on_a_gpu_reserves_its_share_of_gpu_memory(tmp_path, monkeypatch):
    with_cuda(monkeypatch)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # a CPU-only setting: ignored on a GPU
    settings = ModelSettings(backend="vllm", model_path=str(model_dir(tmp_path)))
    need = need_for(settings, total=machine(ram=20 * GB, gpu=80 * GB))
    assert (need.where, need.bytes) == ("GPU", int(0.9 * 80 * GB))


def test_an_openai_compatible_server_needs_nothing_here():
    need = need_for(ModelSettings(backend="openai", api_model="gpt-x"))
    assert (need.where, need.bytes) == ("remote", 0)
    assert need.model.startswith("gpt-x")


# ----- check_fit ----------------------------------------------------------------------------------------------------

def hf(folder: Path, **changes: Any) -> ModelSettings:
    return replace(ModelSettings(backend="hf", model_path=str(folder), device="cpu", dtype="float16"), **changes)


def test_check_fit_refuses_with_the_model_the_figure_needed_and_the_figure_free(tmp_path):
    folder = model_dir(tmp_path, "float16", {"model.safetensors": 1000 * MB})  # needs 1.2 GB
    with pytest.raises(DoesNotFit) as refused:
        check_fit([hf(folder)], [], free=machine(ram=800 * MB), total=machine(ram=24 * GB))
    message = str(refused.value)
    assert "model on Hugging Face transformers needs about 1.2 GB of RAM" in message
    assert "800 MB is free (of 24 GB)" in message and "Unload a model" in message
    assert (refused.value.where, refused.value.needed, refused.value.free) == ("RAM", int(1200 * MB), 800 * MB)


def test_check_fit_keeps_headroom_and_says_so(tmp_path):
    folder = model_dir(tmp_path, "float16", {"model.safetensors": 1000 * MB})
    with pytest.raises(DoesNotFit, match="10% of it is kept spare"):
        check_fit([hf(folder)], [], free=machine(ram=1300 * MB), total=machine())
    assert check_fit([hf(folder)], [], free=machine(ram=1300 * MB), headroom=1.0)[0].bytes == int(1200 * MB)


def test_settings_shared_by_several_targets_count_once_and_different_ones_add_up(tmp_path):
    folder = model_dir(tmp_path, "float16", {"model.safetensors": 500 * MB})  # 600 MB each
    free = machine(ram=1000 * MB)
    needs = check_fit([hf(folder), hf(folder), hf(folder)], [], free=free)
    assert [need.bytes for need in needs] == [int(600 * MB)]
    with pytest.raises(DoesNotFit, match="together") as refused:
        check_fit([hf(folder), hf(folder, hf_max_batch=1)], [], free=free)  # two engines
    assert refused.value.needed == int(1200 * MB) and len(refused.value.needs) == 2


def test_loaded_settings_are_not_counted_again(tmp_path):
    folder = model_dir(tmp_path, "float16", {"model.safetensors": 500 * MB})
    loaded, new = hf(folder), hf(folder, hf_max_batch=1)
    needs = check_fit([loaded, new], {loaded}, free=machine(ram=1000 * MB))
    assert [need.settings for need in needs] == [new]
    assert check_fit([loaded], [loaded], free=machine(ram=0)) == []


def test_ram_and_gpu_are_counted_apart(tmp_path, monkeypatch):
    with_cuda(monkeypatch)
    folder = model_dir(tmp_path, "float16", {"model.safetensors": 500 * MB})
    on_gpu = hf(folder, device="cuda")
    needs = check_fit([hf(folder), on_gpu], [], free=machine(ram=1000 * MB, gpu=1000 * MB), total=machine())
    assert [need.where for need in needs] == ["RAM", "GPU"]
    with pytest.raises(DoesNotFit, match="of GPU") as refused:
        check_fit([hf(folder), on_gpu], [], free=machine(ram=1000 * MB, gpu=100 * MB), total=machine())
    assert refused.value.where == "GPU"


def test_remote_and_unknown_needs_never_refuse(tmp_path):
    wanted = [ModelSettings(backend="openai"), ModelSettings(model_path=str(tmp_path / "nowhere"), device="cpu")]
    needs = check_fit(wanted, [], free=machine(ram=0, gpu=0))
    assert [(need.where, need.bytes) for need in needs] == [("remote", 0), ("RAM", None)]


def test_an_unknown_free_figure_never_refuses(tmp_path):
    folder = model_dir(tmp_path, "float16")
    assert len(check_fit([hf(folder, device="cuda")], [], free=machine(ram=0))) == 1  # no GPU figure


# ----- figures ------------------------------------------------------------------------------------------------------

def test_describe_bytes():
    assert [describe_bytes(n) for n in (0, 270 * MB, 999 * MB, 999_600_000, 1_234_000_000, 24 * GB)] == \
        ["0 kB", "270 MB", "999 MB", "1.0 GB", "1.2 GB", "24 GB"]


def test_free_and_total_memory_of_this_machine():
    free, total = free_bytes("RAM"), total_bytes("RAM")
    assert free is not None and total is not None and 0 < free <= total
    assert free_bytes("GPU") is None and total_bytes("GPU") is None  # no CUDA (the autouse fixture)
