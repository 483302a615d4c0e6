"""The vLLM backend on a GPU against the transformers backend (needs vllm and CUDA; never in CI).

Run: ``pytest -m gpu tests/integration/test_vllm_gpu.py``. The model is the tiny random Llama that
scripts/gpu_check.py builds (no download).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"top_k": 4, "max_new_tokens": 12}


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from recontext_engine import ReContextEngine

    check = _gpu_check()
    folder = check.build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")
    rng = random.Random(3)
    cases = [check.make_case(rng, 60) for _ in range(4)]
    heads = check.TINY_HEADS
    on_vllm = dict(
        model=str(folder), backend="vllm", heads=heads, gpu_memory_utilization=0.25, max_model_len=4096
    )
    engines = {
        "transformers": ReContextEngine.from_pretrained(
            str(folder), backend="transformers", device="cuda", dtype="float32", heads=heads
        ),
        "paged": ReContextEngine.from_pretrained(**on_vllm, readout="paged", dtype="bfloat16"),
        "vllm+transformers": ReContextEngine.from_pretrained(
            **on_vllm, readout="transformers", readout_device="cuda", dtype="float32"
        ),
    }
    return engines, cases


def _spans(evidence):
    return {(e.doc_index, e.char_start, e.char_end) for e in evidence}


def test_paged_rows_match_the_transformers_readout(setup):
    engines, cases = setup
    tf, paged = engines["transformers"], engines["paged"]
    context, question, _ = cases[0]
    request = tf._start(context, question, tf._config(None, OPTIONS))
    suffix = tf.prompts.suffix(request.prefix, question, [], request.config)
    want = tf.backend.read(request.cache, len(request.prefix.ids), suffix.ids, tf.heads, 8)
    cache = paged.backend.prefill(request.prefix.ids)
    for _ in range(2):  # the second read hits the prefix cache (and, for the same prompt, the salted retry)
        got = paged.backend.read(cache, len(request.prefix.ids), suffix.ids, paged.heads, 8)
        assert got.shape == want.shape
        assert float((got - want).abs().max()) < 0.05  # bf16 vLLM against float32 transformers


def test_evidence_matches_across_backends(setup):
    engines, cases = setup
    tf = engines["transformers"]
    for context, question, _ in cases:
        want = _spans(tf.select_evidence(context, question, **OPTIONS))
        assert _spans(engines["vllm+transformers"].select_evidence(context, question, **OPTIONS)) == want
        got = _spans(engines["paged"].select_evidence(context, question, **OPTIONS))
        assert len(got & want) / max(1, len(got | want)) >= 0.75


def test_generation_and_batch(setup):
    engines, cases = setup
    paged = engines["paged"]
    answers = [paged.answer(c, q, rounds=0, **OPTIONS) for c, q, _ in cases]
    assert all(a.usage.output_tokens > 0 for a in answers)
    config = paged.default_config.with_options(rounds=0, **OPTIONS)
    prompts = []
    for context, question, _ in cases:
        request = paged._start(context, question, config)
        prompts.append(request.prefix.ids + paged.prompts.suffix(request.prefix, question, [], config).ids)
    batch = paged.backend.generate_batch(prompts, config)
    assert len(batch) == len(cases)
    texts = [paged.tokenizer.decode(t, skip_special_tokens=True) for t in batch]
    assert sum(t == a.text for t, a in zip(texts, answers, strict=True)) >= len(cases) - 1
