"""The token ids of a raw completion prompt (legacy text completions: no chat template), and fill-in-the-middle
prompts built with the FIM tokens of the model families that have them, in prefix-suffix-middle order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.clients.client_protocol import ClientError


@dataclass(frozen=True)
class FIMTokens:
    """The three tokens a family's fill-in-the-middle prompt is made of: prefix, suffix, then the middle to write."""

    families: str
    prefix: str
    suffix: str
    middle: str

    def describe(self) -> str:
        return f"{self.prefix} {self.suffix} {self.middle} ({self.families})"


KNOWN_FIM_TOKENS = (
    FIMTokens("StarCoder, SmolLM, SantaCoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    FIMTokens("Qwen2.5-Coder, CodeGemma", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    FIMTokens("DeepSeek-Coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
)
# Left out: CodeLlama (its suffix is tokenized without sentencepiece's leading space, which a joined text cannot say)
# and Codestral (suffix-prefix-middle order).


def fim_tokens(tokenizer: Any) -> FIMTokens | None:
    """The first known family whose three FIM tokens are all in this tokenizer's vocabulary, or None."""
    vocabulary = tokenizer.get_vocab()
    for tokens in KNOWN_FIM_TOKENS:
        if all(token in vocabulary for token in (tokens.prefix, tokens.suffix, tokens.middle)):
            return tokens
    return None


def raw_prompt_ids(tokenizer: Any, prompt: str | list[int], suffix: str | None = None) -> list[int]:
    """The ids the model reads for `prompt`: a text tokenized with the tokenizer's own special tokens (a BOS where it
    adds one), as vLLM's completions endpoint does; token ids as they are, checked against the vocabulary. With a
    `suffix`, the fill-in-the-middle prompt around them. An empty suffix on a model without FIM tokens asks for
    nothing after the gap: a plain continuation."""
    tokens = fim_tokens(tokenizer) if suffix is not None else None
    if suffix and tokens is None:
        known = "; ".join(family.describe() for family in KNOWN_FIM_TOKENS)
        raise ClientError("This model cannot fill in the middle: its tokenizer has none of the fill-in-the-middle "
                          f"token sets known here ({known}). Send the prompt without a suffix, or load a code model "
                          "trained with FIM tokens.")
    if isinstance(prompt, str):
        text = prompt if tokens is None else f"{tokens.prefix}{prompt}{tokens.suffix}{suffix}{tokens.middle}"
        ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    else:
        _check_ids(prompt, len(tokenizer))
        ids = list(prompt)
        if tokens is not None:  # the caller's ids are the prefix: special tokens in them are theirs to choose
            suffix_ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
            ids = [_token_id(tokenizer, tokens.prefix), *ids, _token_id(tokenizer, tokens.suffix), *suffix_ids,
                   _token_id(tokenizer, tokens.middle)]
    if not ids:
        raise ClientError("The prompt is empty: give some text or token ids to continue.")
    return ids


def _check_ids(ids: list[int], vocabulary_size: int) -> None:
    """Engines index their embeddings with these ids: one outside the vocabulary fails a generation, or worse."""
    for token_id in ids:
        if not 0 <= token_id < vocabulary_size:
            raise ClientError(f"Token id {token_id} is not in this model's vocabulary (ids 0 to "
                              f"{vocabulary_size - 1}).")


def _token_id(tokenizer: Any, token: str) -> int:
    return int(tokenizer.convert_tokens_to_ids(token))
