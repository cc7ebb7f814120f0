"""Build a tiny, randomly initialised vision-language model in seconds, shaped like SmolVLM-256M-Instruct: the
Idefics3 architecture (a SigLIP-style vision tower, pixel-shuffle connector, Llama text model), transformers' real
Idefics3Processor and its PIL image processor, a byte-level BPE tokenizer trained in code with Idefics3's image
tokens, and a chat template in SmolVLM's shape ("User:<image>question<end_of_utterance>\\nAssistant:"), which,
like SmolVLM's, renders message content only as a list of parts.

Each 32x32 image becomes 4 image tokens between <fake_token_around_image> markers (no tiling). head_dim is 32 and
the vision tower's attention heads are 32 wide, so vLLM's CPU kernels accept it too.
"""

from __future__ import annotations

from pathlib import Path

from tests.tiny_model import _CORPUS

IMAGE_TOKEN = "<image>"
IMAGE_TOKENS_PER_IMAGE = 4  # (image 32 / patch 8)² patches, pixel-shuffled by 2×2
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", IMAGE_TOKEN,
                  "<global-img>"]

CHAT_TEMPLATE = (
    "<|im_start|>{%- for message in messages %}{{ message.role | capitalize }}"
    "{%- if message.content[0].type == 'image' %}:{% else %}: {% endif %}"
    "{%- for part in message.content %}"
    "{%- if part.type == 'text' %}{{ part.text }}{% elif part.type == 'image' %}<image>{% endif %}"
    "{%- endfor %}<end_of_utterance>\n{% endfor %}"
    "{%- if add_generation_prompt %}Assistant:{% endif %}"
)


def build_tiny_vlm(folder: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    folder.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
        model_max_length=4096, additional_special_tokens=SPECIAL_TOKENS[2:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    image_processor = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": 32},
                                                max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                  image_seq_len=IMAGE_TOKENS_PER_IMAGE, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    eos, pad = tokenizer.convert_tokens_to_ids("<end_of_utterance>"), tokenizer.pad_token_id
    config = Idefics3Config(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1,
                       "image_size": 32, "patch_size": 8},
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                     "max_position_embeddings": 4096, "eos_token_id": eos, "pad_token_id": pad,
                     "bos_token_id": tokenizer.bos_token_id},
        scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN), pad_token_id=pad,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)
    # As in tests/tiny_model.py: random weights would end answers at random, so special tokens are suppressed.
    model.generation_config.suppress_tokens = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    model.generation_config.eos_token_id = eos
    model.save_pretrained(folder, safe_serialization=True)
    return folder
