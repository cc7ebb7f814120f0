"""How one reply picks its tokens on the HF backend: the logits processors its settings ask for, and the sampler.

generate() takes the processors (`answer_processors`) and applies the warpers itself; the batched decoder
(app/clients/hf/batch.py) runs several replies in one forward pass and picks each one's token with a `TokenPicker`
of its own, so every reply keeps its own temperature, top-p, top-k, seed, penalty and grammar. It applies the
processors in generate()'s order and samples from the same distribution as generate()'s warpers (`nucleus`): a
greedy reply is the same on both paths; a sampled one with a seed is the same again on the same path (the two
paths draw their random numbers over different lists of tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import (
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from app.clients.client_protocol import GenerationParams


def torch_seed(seed: int) -> int:
    """`seed` in the range torch.manual_seed accepts (unsigned 64 bits), so that no integer fails a generation.
    torch already reads a negative seed modulo 2**64, so seeds it accepted keep their meaning."""
    return seed % 2**64


def answer_processors(params: GenerationParams, prompt_length: int,
                      grammar: LogitsProcessorList) -> LogitsProcessorList:
    """The processors a reply's settings add to the model's own: its grammar, and its repetition penalty."""
    processors = LogitsProcessorList(grammar)
    if params.repetition_penalty != 1.0:
        # On the answer's own tokens only. transformers' default counts the prompt's too, which keeps a model
        # from quoting a tool result: SmolLM2 at 1.1 answered "17 × 23 ≡ 45" after the calculator said 391.
        processors.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty,
                                                           prompt_ignore_length=prompt_length))
    return processors


def suppressed_tokens(generation_config: Any, stop_token_ids: Sequence[int], constrained: bool) -> list[int]:
    """The tokens the model's generation_config.json suppresses. Under a grammar, once it is complete it allows only
    stop tokens: those must not be suppressed too, or every token would be masked."""
    suppressed = list(generation_config.suppress_tokens or [])
    return [t for t in suppressed if t not in stop_token_ids] if constrained else suppressed


def nucleus(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens sampling may pick from one row of `scores` [vocabulary], and their probabilities: the same
    distribution as transformers' Temperature, TopK and TopP warpers followed by a softmax, without sorting the whole
    vocabulary. (The warpers sort all 49152 logits of SmolLM2 for top-p on every token: 2.8 ms of a 55 ms step for
    one answer, 23 ms of an 80 ms step for eight.) Only the k best (top-k), or the best few while their mass
    already reaches top-p, are sorted; the whole vocabulary only when neither holds.
    """
    scores = scores / temperature
    vocabulary = scores.shape[-1]
    limit = min(top_k, vocabulary) if top_k > 0 else vocabulary
    if top_k > 0:
        values, indices = torch.topk(scores, limit)  # sorted, best first
        normaliser = torch.logsumexp(values, dim=-1)
    else:
        normaliser = torch.logsumexp(scores, dim=-1)
        values, indices = torch.topk(scores, min(64, vocabulary))
        mass = torch.exp(values - normaliser).sum()
        if top_p >= 1.0 or mass < top_p:  # the nucleus reaches past the 64 best: all of it, sorted
            values, indices = torch.sort(scores, descending=True)
    probabilities = torch.exp(values - normaliser)
    if top_p < 1.0:
        # A token stays while the tokens better than it hold less than top_p (TopPLogitsWarper's rule); the best stays.
        before = torch.cumsum(probabilities, dim=-1) - probabilities
        keep = before < top_p
        keep[0] = True
        values, indices = values[keep], indices[keep]
        probabilities = torch.softmax(values, dim=-1)
    else:
        probabilities = probabilities / probabilities.sum()
    return indices, probabilities


class TokenPicker:
    """One reply's next-token choice from its row of logits: generate()'s processors, then its sampling rule."""

    def __init__(self, params: GenerationParams, prompt_length: int, max_new_tokens: int, grammar: LogitsProcessorList,
                 suppress: Sequence[int], stop_token_ids: Sequence[int], device: torch.device) -> None:
        processors = answer_processors(params, prompt_length, grammar)
        if suppress:
            processors.insert(0, SuppressTokensLogitsProcessor(list(suppress), device=str(device)))
        if params.ignore_eos and stop_token_ids:
            processors.insert(0, MinNewTokensLengthLogitsProcessor(prompt_length, max_new_tokens, list(stop_token_ids),
                                                                   device=str(device)))
        self.params = params
        self.greedy = params.greedy
        self.processors = processors
        self.generator: torch.Generator | None = None
        if params.seed is not None and not self.greedy:
            # A seed of its own: the reply is the same whatever else is being generated beside it.
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(torch_seed(params.seed))

    @property
    def plain_argmax(self) -> bool:
        """Greedy with nothing to process: the batch's argmax is this reply's token."""
        return self.greedy and not self.processors

    def pick(self, token_ids: torch.Tensor, logits: torch.Tensor) -> int:
        """`token_ids`: [1, prompt + answer so far]; `logits`: [1, vocabulary], for the next token."""
        scores = self.processors(token_ids, logits.float())  # type: ignore[arg-type]  # FloatTensor is a Tensor
        if self.greedy:
            return int(scores.argmax(dim=-1))
        params = self.params
        indices, probabilities = nucleus(scores[0], params.temperature, params.top_k, params.top_p)
        choice = torch.multinomial(probabilities, num_samples=1, generator=self.generator)
        return int(indices[choice])
