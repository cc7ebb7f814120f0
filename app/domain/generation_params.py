"""The sampling settings of one answer and their built-in defaults. A module of its own, below both the Client
protocol (app/clients/client_protocol.py) and the model-specific defaults (app/clients/generation_defaults.py), which
import it."""

from __future__ import annotations

from dataclasses import dataclass

GREEDY_BELOW = 1e-5  # temperatures below this decode greedily, as vLLM's sampler does
# The settings a model's authors recommend (app/clients/generation_defaults.py reads them from generation_config.json),
# and the ones a request may leave to a server's model defaults (`GenerationParams.server_defaults`).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings. temperature 0 (or below GREEDY_BELOW) means greedy decoding; top_k 0 means no top-k cut.
    The defaults here are also the last layer of app/clients/generation_defaults.py (its BUILT_IN).

    `server_defaults` names sampling fields (of SAMPLING_FIELDS) whose values the user has not chosen, to be left
    to whoever serves the model: a remote OpenAI-compatible server (app/clients/openai.py) leaves them out of the
    request, so the server applies the model's own generation config (vLLM's server and ours do) instead of our
    guess at it. The values of those fields still hold this app's best guess of the model's defaults (the sidebar
    shows them); local backends ignore `server_defaults` and use those values, since they are the model's
    defaults already. Empty (the default): every field is sent as it is."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 50
    repetition_penalty: float = 1.0
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False  # benchmarks only: generate exactly max_new_tokens
    thinking: bool | None = None  # a reasoning model's thought on/off where its template has the switch; None: default
    truncate: bool = True  # drop the oldest messages of a conversation over the context window; False: refuse it
    server_defaults: frozenset[str] = frozenset()  # sampling fields left to a remote server's model defaults

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.server_defaults, str):  # "temperature" would otherwise become its letters
            problems.append(f"server_defaults must be a set of field names (got the string {self.server_defaults!r})")
        else:
            # A set or a list is taken too; stored frozen, so the settings stay hashable.
            object.__setattr__(self, "server_defaults", frozenset(self.server_defaults))
            unknown = sorted(self.server_defaults - set(SAMPLING_FIELDS))
            if unknown:
                problems.append(f"server_defaults may name only {', '.join(SAMPLING_FIELDS)} "
                                f"(got {', '.join(map(repr, unknown))})")
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

