"""Models loaded at the same moment in one process, as the app's users load them: chat models through the pool
(several users choosing models, Compare's targets loading side by side), the speech model and an embedding model
beside them. transformers' from_pretrained swaps class methods for the length of a load; unguarded, such loads left
its no-op weight tying in place for good, and every later load of a model that shares its embeddings with its output
layer (SmolLM2 and the tiny models here) failed ("Cannot copy out of meta tensor") until the app restarted."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from transformers.modeling_utils import PreTrainedModel

from app.clients.pool import ClientPool
from app.config import ModelSettings
from app.knowledge.embeddings import LocalEmbedder
from app.speech.transcriber import SpeechModel, Transcriber
from tests.tiny_model import build_tiny_embedder, build_tiny_model

ROUNDS = 3


def _tied(client) -> bool:
    model = client.model
    return model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def _all_at_once(loads: list[Callable[[], object]]) -> list[BaseException]:
    """Run every load in a thread of its own, all released at the same moment; what they raised."""
    start, failures = threading.Barrier(len(loads)), []

    def load_when_all_are_ready(load: Callable[[], object]) -> None:
        start.wait()
        try:
            load()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=load_when_all_are_ready, args=(load,)) for load in loads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return failures


def test_models_loading_at_once_load_whole_and_so_do_the_next(tmp_path, tiny_whisper_dir):
    library_methods = (PreTrainedModel.tie_weights, PreTrainedModel.init_weights)
    chat_models = [build_tiny_model(tmp_path / f"chat-{index}", seed=index) for index in range(4)]
    embedder = build_tiny_embedder(tmp_path / "embedder")

    for _ in range(ROUNDS):
        pool = ClientPool()
        loads = [functools.partial(pool.hold, f"user {folder.name}", ModelSettings(
            backend="hf", model_path=str(folder), dtype="float32", device="cpu")) for folder in chat_models]
        loads += [functools.partial(Transcriber, SpeechModel(tiny_whisper_dir, "tiny-whisper")),
                  functools.partial(LocalEmbedder, embedder)]
        try:
            assert not _all_at_once(loads)
            assert all(_tied(client) for client in pool.loaded().values())
        finally:
            pool.close()

    assert (PreTrainedModel.tie_weights, PreTrainedModel.init_weights) == library_methods
    # A model loaded afterwards, alone, is whole too: its output layer is its embeddings.
    later = ClientPool()
    try:
        client = later.get(ModelSettings(backend="hf", model_path=str(chat_models[0]), dtype="float32",
                                         device="cpu"))
        assert _tied(client)
    finally:
        later.close()
