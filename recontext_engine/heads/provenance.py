"""What pins a detected head set to its model and its run: weight digests, versions, environment."""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ..loading import embedded_gguf, file_digest


def file_sha256(path: Path) -> str:
    """The sha256 of a whole file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def model_identity(model_name: str, model_source: str, config: Any) -> dict[str, Any]:
    """Name plus what pins the weights: a file's sha256, a hub revision or a folder's weight digest."""
    identity: dict[str, Any] = {"name": model_name, "source": model_source}
    path: Path | None = None
    if model_source.startswith("embedded:"):
        path = embedded_gguf()
    elif model_source:
        path = Path(model_source)
    if path is not None and path.is_file():
        identity["file_sha256"] = file_sha256(path)
    elif path is not None and path.is_dir():
        weights = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
        identity["weights_digest"] = hashlib.sha256(
            "".join(f"{p.name}:{file_digest(p)};" for p in weights).encode()
        ).hexdigest()[:16]
    revision = getattr(config, "_commit_hash", None)
    if revision:
        identity["revision"] = revision
    return identity


def recontext_version() -> str:
    """The installed distribution's version (read from its metadata: importing the package root here
    would make a cycle through the engine)."""
    try:
        return metadata.version("recontext")
    except metadata.PackageNotFoundError:
        return "unknown"


def environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
