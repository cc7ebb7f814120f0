"""Model files written for tests: real GGUF files (through the `gguf` package's writer) and real Hugging Face
model folders (config, chat template, model card and safetensors weights), small enough to write in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TOOLS_TEMPLATE = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
THINKING_TEMPLATE = "{% if enable_thinking %}<think>{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"


def write_gguf(path: Path, name: str = "Tiny Llama", template: str = TOOLS_TEMPLATE, licence: str | None = "mit",
               context: int = 2048) -> Path:
    """A real GGUF file: llama metadata and two small tensors (1,024 + 4,096 values)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(context)
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if licence:
        writer.add_license(licence)
    writer.add_chat_template(template)
    writer.add_tensor("token_embd.weight", np.zeros((16, 64), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((64, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_folder(folder: Path, template: str = THINKING_TEMPLATE, licence: str = "apache-2.0",
                 vision: bool = False, architecture: str = "Qwen2ForCausalLM") -> Path:
    """A Hugging Face model folder: config.json, a chat template, a model card and real safetensors weights."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [architecture], "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 3, "max_position_embeddings": 4096,
              "torch_dtype": "bfloat16"}
    if vision:
        config["vision_config"] = {"hidden_size": 32}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template} if template else {}))
    (folder / "README.md").write_text(f"---\nlicense: {licence}\ntags: [chat]\n---\n# A model\n")
    save_file({"embed.weight": np.zeros((10, 64), dtype=np.float16),
               "lm_head.weight": np.zeros((10, 64), dtype=np.float16)}, str(folder / "model.safetensors"))
    return folder
