"""The command line's model flags, shared by ``recontext ask`` and ``recontext serve``: the model,
its backend and device, and vLLM's own engine arguments, as keywords of
:meth:`ReContextEngine.from_pretrained <recontext_engine.ReContextEngine.from_pretrained>`.

vLLM's flags keep the names ``vllm serve`` gives them, so a command line moves over unchanged;
they go to ``vllm.LLM`` as they are, where vLLM's own runtime scales out (``--tensor-parallel-size``
over the GPUs of a node, ``--pipeline-parallel-size`` across nodes with
``--distributed-executor-backend ray``). Any other engine argument: ``--engine-arg KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .errors import ReContextError

# (flag, type, help): vLLM engine arguments under the names `vllm serve` uses
VLLM_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--tensor-parallel-size", int, "workers per pipeline stage, each holding a slice of every layer"),
    ("--pipeline-parallel-size", int, "pipeline stages, each holding a run of layers (nodes, with ray)"),
    ("--distributed-executor-backend", str, "how vLLM starts its workers: mp (one node) or ray (several)"),
    ("--max-model-len", int, "the context window vLLM serves (default: the model's)"),
    ("--gpu-memory-utilization", float, "share of GPU memory vLLM may take (weights and KV cache)"),
    ("--kv-cache-memory-bytes", int, "the KV cache's size in bytes (default on vLLM's CPU build: 1 GiB)"),
    ("--quantization", str, "the weights' quantization method (awq, gptq, fp8, ...)"),
    ("--max-num-seqs", int, "most sequences vLLM runs in one batch"),
)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--heads``, ``--backend``, ``--device``, ``--dtype`` and the vLLM engine flags."""
    parser.add_argument(
        "--model", default=None, help="hub id, local folder or .gguf (default: embedded SmolLM2)"
    )
    parser.add_argument("--heads", default="auto", help="'auto' or a head-set JSON file")
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--device", default=None, help="transformers device (default cpu)")
    parser.add_argument("--dtype", default=None, help="weights' dtype: auto, float32, bfloat16, float16")
    group = parser.add_argument_group("vLLM engine arguments (with --backend vllm; passed to vllm.LLM)")
    for flag, kind, text in VLLM_FLAGS:
        group.add_argument(flag, type=kind, default=None, help=text)
    group.add_argument(
        "--enforce-eager", action="store_true", default=None, help="no CUDA graphs nor torch.compile"
    )
    group.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other vllm.LLM argument (VALUE read as JSON where it parses, else as text); repeat",
    )


def parse_engine_arg(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as a vLLM keyword and its value (JSON where it parses, else the text)."""
    key, sep, text = item.partition("=")
    key = key.strip().lstrip("-").replace("-", "_")
    if not sep or not key.isidentifier():
        raise ReContextError(f"--engine-arg takes KEY=VALUE (say max_num_batched_tokens=4096), got {item!r}")
    try:
        return key, json.loads(text)
    except json.JSONDecodeError:
        return key, text


def vllm_engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """The vLLM engine arguments given on the command line, with vLLM's keyword names."""
    given: dict[str, Any] = {}
    for flag, _, _ in VLLM_FLAGS:
        name = flag[2:].replace("-", "_")
        if getattr(args, name) is not None:
            given[name] = getattr(args, name)
    if args.enforce_eager:
        given["enforce_eager"] = True
    for item in args.engine_arg:
        key, value = parse_engine_arg(item)
        if key in given:
            raise ReContextError(f"engine argument {key!r} is given twice")
        given[key] = value
    return given


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keywords for ``ReContextEngine.from_pretrained`` (all but the model itself).

    Raises:
        ReContextError: vLLM engine flags with the transformers backend, or a malformed ``--engine-arg``.
    """
    engine_args = vllm_engine_args(args)
    if engine_args and args.backend != "vllm":
        flags = ", ".join("--" + key.replace("_", "-") for key in engine_args)
        raise ReContextError(f"{flags}: vLLM engine arguments, for --backend vllm only")
    options: dict[str, Any] = {"heads": args.heads, "backend": args.backend, "device": args.device}
    if args.dtype is not None:
        options["dtype"] = args.dtype
    if engine_args:
        options["engine_args"] = engine_args
    return options
