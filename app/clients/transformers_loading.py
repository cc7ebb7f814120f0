"""One model load at a time through transformers, in the whole process.

transformers' `from_pretrained` is not thread-safe: for the length of a load it swaps methods of the
`PreTrainedModel` class for no-ops (`initialization.no_tie_weights`, `no_init_weights`) and then puts back what it
found. Two loads at once (two users choosing models, Compare's targets loading side by side, the speech or embedding
model beside a chat model) can interleave so that the no-op is what gets put back, for good: every later load in the
process then leaves its output layer untied from the embeddings, and the many small models that share the two
(SmolLM2, Qwen2.5-0.5B, Llama 3.2 1B...) fail to load ("Cannot copy out of meta tensor") or answer from random
weights, for every user until the app restarts. So every load of transformers weights in the app, and the libraries
that call it (sentence-transformers), goes through `transformers_loading()`. Tokenizers, processors and configs
swap nothing and load freely."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Process-wide by necessity: what it guards (transformers' class attributes) is process-wide. It holds no state.
_ONE_LOAD_AT_A_TIME = threading.Lock()


@contextmanager
def transformers_loading() -> Iterator[None]:
    """Hold this around a call that loads a transformers model's weights; a second caller waits for the first."""
    with _ONE_LOAD_AT_A_TIME:
        yield
