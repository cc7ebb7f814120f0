"""Build a tiny, randomly initialised chat model in seconds: Qwen2 architecture, a byte-level BPE tokenizer
trained in code, and a ChatML chat template that renders tools (Hermes style), like real Qwen models.

Random weights produce nonsense text, but every code path (template, tokenizer, generate, streaming, stop
tokens) is the real one. head_dim is 32 so vLLM's CPU kernels accept it too.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from pathlib import Path

# Where the tests' transformers clients run: the CPU, or `DEMO_TEST_DEVICE=cuda` to run the engine tests on a GPU.
TEST_DEVICE = os.environ.get("DEMO_TEST_DEVICE", "cpu")

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>"]  # added but not special, as in Qwen2.5: decoded text keeps them

CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}{%- set system = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if tools %}<|im_start|>system\n{{ system }}\n\n# Tools\n\nYou may call one or more functions.\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\nFor each function call, return a json "
    "object with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\n"
    "{%- elif system %}<|im_start|>system\n{{ system }}<|im_end|>\n{%- endif %}"
    "{%- for message in rest %}"
    "{%- if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] %}\n<tool_call>\n{\"name\": \"{{ call.function.name }}\", "
    "\"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

_CORPUS = [
    "The capital of France is Paris. Paris is a city in Europe.",
    "Hello! How can I help you today? I am a helpful assistant.",
    "def add(a, b):\n    return a + b\n",
    "The weather in Berlin is sunny, 21 degrees Celsius.",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. 東京 café naïve résumé 🙂",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: , . ; : ! ? ( ) [ ] { } < > / \\ | - _ + = * & ^ % $ # @",
]


# GLM-4 style: tools on the system message, a call as "<|assistant|>name\n{json}", results in <|observation|>.
GLM4_TEMPLATE = (
    "[gMASK]<sop>{%- for m in messages %}"
    "{%- if m.tools is defined and m.tools %}<|system|>\n# Tools{% for t in m.tools %}\n## {{ t.function.name }}\n"
    "{{ t.function | tojson }}{% endfor %}{% endif %}"
    "{%- if m.role == 'observation' %}<|observation|>\n{{ m.content }}"
    "{%- elif m.content or m.metadata %}<|{{ m.role }}|>{{ m.metadata or '' }}\n{{ m.content }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|assistant|>{%- endif %}"
)
# Llama 3.1 style: JSON calls, <|python_tag|>, ipython results.
LLAMA3_TEMPLATE = (
    "{%- for m in messages %}<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
    "{%- if m.role == 'user' and tools and loop.last %}Use these functions, replying with JSON "
    "{\"name\": function name, \"parameters\": arguments}:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "{%- endif %}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}<|python_tag|>{\"name\": \"{{ c.function.name }}\", "
    "\"parameters\": {{ c.function.arguments | tojson }}}{% endfor %}<|eom_id|>"
    "{%- else %}{{ m.content }}<|eot_id|>{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{%- endif %}"
)
# Reasoning models. Qwen3 style: the thought is on unless enable_thinking=false, which closes an empty one in the
# generation prompt. DeepSeek-R1 style: the generation prompt opens the thought for the model.
_ASSISTANT_TURN = "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
QWEN3_TEMPLATE = CHAT_TEMPLATE.replace(_ASSISTANT_TURN, (
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"))
R1_TEMPLATE = CHAT_TEMPLATE.replace(_ASSISTANT_TURN,
                                    "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
assert QWEN3_TEMPLATE != CHAT_TEMPLATE != R1_TEMPLATE
THINK_TAGS = ["<think>", "</think>"]  # added but not special, as in Qwen3: decoded text keeps them
FIM_TOKENS = ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"]  # fill-in-the-middle, special as in StarCoder

FAMILY_SPECIALS = {
    "glm4": ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "[gMASK]", "<sop>"],
    "llama3": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
}


def build_tiny_model(folder: Path, seed: int = 0, family: str = "qwen", fim: bool = False,
                     **dimensions: int) -> Path:
    """A tiny model whose tokenizer and chat template follow `family`: "qwen" (Hermes), "glm4", "llama3", or the
    reasoning families "qwen3" (a thought, switched by enable_thinking) and "r1" (the prompt opens the thought).
    `fim`: its vocabulary has StarCoder's fill-in-the-middle tokens too (special, so never generated).
    `dimensions` override the network's (hidden_size=1536, num_hidden_layers=28...: a model of a real model's shape
    and speed, for benchmarks on machines that cannot download one)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    extra_specials = FAMILY_SPECIALS.get(family, []) + (FIM_TOKENS if fim else [])
    specials = SPECIAL_TOKENS + extra_specials
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(_CORPUS * 20, trainer=trainer)
    eos = {"glm4": "<|user|>", "llama3": "<|eot_id|>"}.get(family, "<|im_end|>")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=eos, pad_token="<|endoftext|>", model_max_length=4096,
        additional_special_tokens=extra_specials,
    )
    tokenizer.add_tokens(TOOL_TAGS + (THINK_TAGS if family in ("qwen3", "r1") else []))
    tokenizer.chat_template = {"glm4": GLM4_TEMPLATE, "llama3": LLAMA3_TEMPLATE, "qwen3": QWEN3_TEMPLATE,
                               "r1": R1_TEMPLATE}.get(family, CHAT_TEMPLATE)
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 4096, **dimensions}
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        **shape,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids(eos),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    # Random weights would end answers at random; suppressing the special tokens makes lengths predictable.
    # (Natural end-of-turn stops are tested on the real SmolLM2.)
    model.generation_config.suppress_tokens = [tokenizer.convert_tokens_to_ids(t) for t in specials]
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_scripted_model(folder: Path, pieces: list[str], family: str = "qwen3") -> Path:
    """A tiny model that answers every question with the text `pieces` joined, one piece per token (at any usual
    temperature): a real Qwen2 network whose layers add nothing, so each position's output depends on the current
    token alone, and whose output layer maps each piece to the next (a chain from the end of the generation prompt
    to <|im_end|>); the pieces become tokens of the vocabulary. For tests and screenshots that need known output
    (say a thought, then an answer) through the real tokenizer, chat template, generate() and streaming."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if len(set(pieces)) != len(pieces):
        raise ValueError("each piece may appear once: the next token depends on the current one alone")
    build_tiny_model(folder, family=family)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens([piece for piece in pieces if piece not in tokenizer.get_vocab()])
    tokenizer.save_pretrained(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                           tokenize=False)
    chain = [tokenizer(prompt, add_special_tokens=False)["input_ids"][-1],
             *(tokenizer.convert_tokens_to_ids(piece) for piece in pieces),
             tokenizer.convert_tokens_to_ids("<|im_end|>")]
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
                         tie_word_embeddings=False, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:  # no attention or MLP output: the residual stream is the token's embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings = torch.nn.functional.normalize(torch.randn(len(tokenizer), 64), dim=-1)
        model.model.embed_tokens.weight.copy_(embeddings)
        model.lm_head.weight.zero_()
        for current, successor in itertools.pairwise(chain):  # a large logit for the successor of each token
            model.lm_head.weight[successor] += 40 * embeddings[current] / 8  # RMSNorm scales unit vectors by 8
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.6  # as reasoning models use
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_tiny_embedder(folder: Path, seed: int = 0) -> Path:
    """A tiny, randomly initialised sentence-embedding model saved as sentence-transformers saves one (a BERT
    encoder with a WordPiece tokenizer, mean pooling, normalization): loaded by the app as a real one would be.
    Random weights give meaningless vectors, but texts sharing words still come out closer than unrelated ones."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from app.clients.transformers_loading import transformers_loading

    torch.manual_seed(seed)
    encoder = folder / "encoder"
    # The vocabulary is written out, not trained: the WordPiece trainer breaks ties in a different order in each
    # process, which gave each run other vectors (and a test comparing similarities a coin toss once in a while).
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    characters = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,?!'-"))
    words = sorted(set(re.findall(r"[a-z]+", _TRAINING_TEXT)))
    vocabulary = list(dict.fromkeys([*specials, *characters, *words, *(f"##{c}" for c in characters)]))
    backend = Tokenizer(models.WordPiece(vocab={token: i for i, token in enumerate(vocabulary)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(  # as BERT's: [CLS] text [SEP]
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=128)
    tokenizer.save_pretrained(encoder)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    BertModel(config).save_pretrained(encoder)
    with transformers_loading():  # a from_pretrained load, maybe beside the app's in this process
        transformer = Transformer(str(encoder), max_seq_length=128)
    model = SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="mean"), Normalize()], device="cpu")
    model.save(str(folder))
    shutil.rmtree(encoder)  # saved again at the top, as sentence-transformers lays a model out
    return folder


_TRAINING_TEXT = ("the keeper of the lighthouse was paid eleven shillings a week. copper wire for the telegraph was "
                  "shipped aboard the schooner. the orchard grew forty varieties of pear. the bridge collapsed in "
                  "the flood and was rebuilt in granite. what how which when where who did was were is are")
