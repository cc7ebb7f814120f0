"""How one reply picks its tokens on the HF backend: the logits processors its settings ask for, and the sampler.

generate() takes the processors (`answer_processors`) and applies the warpers itself; the batched decoder
(app/clients/hf_batch.py) runs several replies in one forward pass and picks each one's token with a `TokenPicker`
of its own, so every reply keeps its own temperature, top-p, top-k, seed, penalty and grammar. Both apply them in
generate()'s order (processors, then the sampling warpers), so a reply does not change with the path it takes.
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
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from app.clients.base import GenerationParams


def torch_seed(seed: int) -> int:
    """`seed` in the range torch.manual_seed accepts (unsigned 64 bits), so that no integer fails a generation.
    torch already reads a negative seed modulo 2**64, so seeds it accepted keep their meaning."""
    return seed % 2**64


def answer_processors(params: GenerationParams, prompt_length: int, grammar: LogitsProcessorList) -> LogitsProcessorList:
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


class TokenPicker:
    """One reply's next-token choice from its row of logits, as generate() would make it with the same settings."""

    def __init__(self, params: GenerationParams, prompt_length: int, max_new_tokens: int, grammar: LogitsProcessorList,
                 suppress: Sequence[int], stop_token_ids: Sequence[int], device: torch.device) -> None:
        processors = answer_processors(params, prompt_length, grammar)
        if suppress:
            processors.insert(0, SuppressTokensLogitsProcessor(list(suppress), device=device))
        if params.ignore_eos and stop_token_ids:
            processors.insert(0, MinNewTokensLengthLogitsProcessor(prompt_length, max_new_tokens, list(stop_token_ids),
                                                                   device=device))
        self.greedy = params.greedy
        if not self.greedy:
            processors.append(TemperatureLogitsWarper(params.temperature))
            if params.top_k > 0:
                processors.append(TopKLogitsWarper(params.top_k))
            if params.top_p < 1.0:
                processors.append(TopPLogitsWarper(params.top_p))
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

    def pick(self, token_ids: torch.LongTensor, logits: torch.FloatTensor) -> int:
        """`token_ids`: [1, prompt + answer so far]; `logits`: [1, vocabulary], for the next token."""
        scores = self.processors(token_ids, logits.float())
        if self.greedy:
            return int(scores.argmax(dim=-1))
        probabilities = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probabilities, num_samples=1, generator=self.generator))
