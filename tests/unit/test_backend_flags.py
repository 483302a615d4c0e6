"""The command line's model flags: vLLM's engine arguments under `vllm serve`'s names, refused where
they cannot apply, and what reaches ``ReContextEngine.from_pretrained``."""

from __future__ import annotations

import argparse

import pytest

from recontext_engine.backend_flags import add_model_arguments, model_options, parse_engine_arg
from recontext_engine.cli import build_parser
from recontext_engine.errors import ReContextError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return parser.parse_args(list(argv))


def test_vllm_flags_become_engine_arguments():
    args = parse(
        *("--backend", "vllm", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"),
        *("--distributed-executor-backend", "ray", "--max-model-len", "8192", "--dtype", "bfloat16"),
        *("--gpu-memory-utilization", "0.8", "--quantization", "awq", "--enforce-eager"),
        *("--engine-arg", "max_num_batched_tokens=4096", "--engine-arg=--swap-space=4"),
        *("--engine-arg", 'hf_overrides={"rope_theta": 1e6}', "--engine-arg", "attention_backend=FLASH_ATTN"),
    )
    assert model_options(args) == {
        "heads": "auto",
        "backend": "vllm",
        "device": None,
        "dtype": "bfloat16",
        "engine_args": {
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "distributed_executor_backend": "ray",
            "max_model_len": 8192,
            "gpu_memory_utilization": 0.8,
            "quantization": "awq",
            "enforce_eager": True,
            "max_num_batched_tokens": 4096,
            "swap_space": 4,
            "hf_overrides": {"rope_theta": 1e6},
            "attention_backend": "FLASH_ATTN",
        },
    }


def test_transformers_takes_no_engine_arguments():
    assert model_options(parse("--device", "cpu")) == {
        "heads": "auto",
        "backend": "transformers",
        "device": "cpu",
    }
    with pytest.raises(
        ReContextError, match="--tensor-parallel-size, --enforce-eager: vLLM engine arguments"
    ):
        model_options(parse("--tensor-parallel-size", "2", "--enforce-eager"))


@pytest.mark.parametrize("item", ["no_equals", "=5", "bad key=1"])
def test_malformed_engine_arg_is_one_clear_error(item):
    with pytest.raises(ReContextError, match="--engine-arg takes KEY=VALUE"):
        parse_engine_arg(item)


def test_an_engine_argument_given_twice_is_refused():
    args = parse("--backend", "vllm", "--max-model-len", "4096", "--engine-arg", "max_model_len=8192")
    with pytest.raises(ReContextError, match="'max_model_len' is given twice"):
        model_options(args)


@pytest.mark.parametrize("command", ["ask", "serve"])
def test_ask_and_serve_take_the_same_model_flags(command):
    required = ["--context", "x.txt", "--question", "q"] if command == "ask" else []
    args = build_parser().parse_args([command, *required, "--backend", "vllm", "--max-num-seqs", "8"])
    assert model_options(args)["engine_args"] == {"max_num_seqs": 8}


def test_serve_refuses_vllm_flags_on_transformers_before_loading_anything(capsys):
    from recontext_engine.cli import main

    assert main(["serve", "--port", "0", "--tensor-parallel-size", "2"]) != 0
    assert "vLLM engine arguments, for --backend vllm only" in capsys.readouterr().err
