"""The sampling settings of one answer and their built-in defaults. A module of its own, below both the Client
protocol (app/clients/base.py) and the model-specific defaults (app/generation_defaults.py), which import it."""

from __future__ import annotations

from dataclasses import dataclass

GREEDY_BELOW = 1e-5  # temperatures below this decode greedily, as vLLM's sampler does


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings. temperature 0 (or below GREEDY_BELOW) means greedy decoding; top_k 0 means no top-k cut.
    The defaults here are also the last layer of app/generation_defaults.py (its BUILT_IN)."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 50
    repetition_penalty: float = 1.0
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False  # benchmarks only: generate exactly max_new_tokens
    thinking: bool | None = None  # a reasoning model's thought on/off where its template has the switch; None: default

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.temperature <= 5.0:
            problems.append(f"temperature must be between 0 and 5 (got {self.temperature})")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            problems.append(f"top_k must be 0 (off) or positive (got {self.top_k})")
        if not 0.0 < self.repetition_penalty <= 5.0:
            problems.append(f"repetition_penalty must be in (0, 5] (got {self.repetition_penalty})")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be at least 1 (got {self.max_new_tokens})")
        if any(not s for s in self.stop):
            problems.append("stop strings must not be empty")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        # vLLM's rule: a temperature this small is greedy. Dividing the logits by it overflows float32 (1e-40 made
        # every probability NaN and failed the generation).
        return self.temperature < GREEDY_BELOW

