"""Build a tiny, randomly initialised speech-recognition model in a second: Whisper's architecture, feature
extractor and tokenizer (byte-level, with Whisper's special tokens), English-only like whisper-tiny.en.

Random weights write nonsense, but every code path of a real Whisper model (the WAV's log-mel features, the
encoder, generate with Whisper's own decoding rules, the tokenizer's decode) is the real one."""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, which byte-level BPE vocabularies are made of."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    codes, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            codes.append(256 + extra)
            extra += 1
    return [chr(code) for code in codes]


def build_tiny_whisper(folder: Path, seed: int = 0, multilingual: bool = False) -> Path:
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )

    vocab = {symbol: index for index, symbol in enumerate(_byte_alphabet())}
    languages = ["<|en|>", "<|fr|>"] if multilingual else []
    for token in [*SPECIALS, *languages[1:]]:
        vocab[token] = len(vocab)
    timestamps = [f"<|{step * 0.02:.2f}|>" for step in range(1501)]  # what long-form transcription steps by
    for token in timestamps:
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=[], unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                                 eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": [*SPECIALS[1:], *languages[1:], *timestamps]})
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tokenizer).save_pretrained(folder)

    ids = {token: vocab[token] for token in SPECIALS}
    config_init = {"init_std": 0.5}  # large random weights: what the model writes depends on what it hears
    config = WhisperConfig(
        vocab_size=len(vocab), num_mel_bins=80, d_model=64, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=1500, max_target_positions=48, pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
        decoder_start_token_id=ids["<|startoftranscript|>"], suppress_tokens=[], begin_suppress_tokens=[],
        **config_init)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"], max_length=48,
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=multilingual,
        **({"lang_to_id": {token: vocab[token] for token in languages},
            "task_to_id": {"transcribe": vocab["<|transcribe|>"], "translate": vocab["<|translate|>"]}}
           if multilingual else {}),
        # Lower-case letters and spaces only, never the end first: the transcript reads as (nonsense) words.
        begin_suppress_tokens=[ids["<|endoftext|>"], vocab["Ġ"]],
        suppress_tokens=[index for symbol, index in vocab.items()
                         if not ("a" <= symbol <= "z" or symbol in ("Ġ", "<|endoftext|>") or symbol in timestamps)])
    model.save_pretrained(folder)
    return folder
