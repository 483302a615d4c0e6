"""The model's input embeddings, read from its checkpoint: vLLM keeps its copy of the weights in its
engine process, and the engine's semantic signal (the embedding signal) needs them here."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch


def embedding_key(config: Any) -> str:
    """The state-dict name of the input-embedding weight of a model with ``config`` (built on the
    meta device: no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    embeddings = model.get_input_embeddings()
    return next(name for name, module in model.named_modules() if module is embeddings) + ".weight"


def load_input_embeddings(source: str, config: Any, revision: str | None = None) -> torch.Tensor | None:
    """The (vocab, dim) input embeddings from the safetensors of ``source`` (a folder or a hub id);
    None, with a warning, where the checkpoint has no such tensor."""
    from safetensors import safe_open

    folder = Path(source)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(source, revision=revision, allow_patterns=["*.json", "*.safetensors"])
        )
    key = embedding_key(config)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [folder / weight_map[key]] if key in weight_map else []
    else:
        files = sorted(folder.glob("*.safetensors"))
    for file in files:
        with safe_open(str(file), framework="pt") as weights:
            if key in set(weights.keys()):
                return weights.get_tensor(key)
    warnings.warn(
        f"no {key} in the safetensors of {source}: selection runs without the semantic signal",
        stacklevel=2,
    )
    return None
