"""Which model folder a local backend loads (`resolve_model_path`): the embedded SmolLM2, or a local Hugging Face
model folder."""

from __future__ import annotations

from pathlib import Path

from app.clients.client_protocol import ClientError
from app.clients.embedded_model import ensure_embedded_model, is_embedded, model_folder


def resolve_model_path(model_path: str) -> Path:
    """The model folder a local backend loads: the embedded SmolLM2 for an empty path (converted on first use),
    else a local Hugging Face model folder, which must exist and hold config.json."""
    if is_embedded(model_path):
        return ensure_embedded_model()
    path = model_folder(model_path)
    if not path.exists():
        raise ClientError(
            f"Model folder {str(path)!r} does not exist. Enter the path of a local Hugging Face model folder "
            "(one with config.json), or clear the field to use the embedded SmolLM2."
        )
    if not (path / "config.json").is_file():
        raise ClientError(
            f"{str(path)!r} has no config.json, so it is not a Hugging Face model folder. "
            "Point to the folder that holds config.json and the *.safetensors weights."
        )
    return path
