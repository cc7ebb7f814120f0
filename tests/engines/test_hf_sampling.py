"""The batched decoder's sampler (app/clients/hf/sampling.py) against transformers' own warpers: the same
distribution over the vocabulary for every temperature, top-k and top-p, whichever shortcut it takes."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from app.clients.client_protocol import GenerationParams
from app.clients.hf.sampling import TokenPicker, nucleus


def warpers_distribution(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return torch.softmax(warpers(torch.zeros(1, 1, dtype=torch.long), scores.unsqueeze(0)), dim=-1)[0]


def nucleus_distribution(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    indices, probabilities = nucleus(scores, temperature, top_k, top_p)
    return torch.zeros_like(scores).index_put_((indices,), probabilities)


@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0])  # flat logits (a wide nucleus) to peaked ones (a narrow one)
@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, 0, 1.0), (0.2, 0, 0.9), (0.7, 50, 0.9), (1.3, 50, 1.0), (0.7, 0, 0.5), (1.0, 5000, 0.95), (0.5, 1, 0.9),
])
def test_nucleus_is_the_warpers_distribution(spread, temperature, top_k, top_p):
    generator = torch.Generator().manual_seed(int(spread * 100) + top_k)
    scores = torch.randn(49152, generator=generator) * spread
    torch.testing.assert_close(nucleus_distribution(scores, temperature, top_k, top_p),
                               warpers_distribution(scores, temperature, top_k, top_p), atol=1e-6, rtol=1e-4)


def test_a_seeded_picker_draws_the_same_tokens_again_and_follows_the_distribution():
    scores = torch.tensor([[4.0, 3.0, 2.0, 0.0, -1.0]])
    params = GenerationParams(temperature=1.0, top_p=0.9, top_k=0, seed=3)
    picks = [TokenPicker(params, 1, 10, LogitsProcessorList(), [], [], torch.device("cpu")) for _ in range(2)]
    ids = torch.zeros(1, 1, dtype=torch.long)
    draws = [[picker.pick(ids, scores) for _ in range(2000)] for picker in picks]
    assert draws[0] == draws[1]
    expected = warpers_distribution(scores[0], 1.0, 0, 0.9)
    counts = torch.bincount(torch.tensor(draws[0]), minlength=5).float() / 2000
    assert counts[3:].sum() == 0  # outside the nucleus: never
    torch.testing.assert_close(counts, expected, atol=0.04, rtol=0)
