"""The vLLM backend's parts that need no vLLM: availability errors, argument pass-through, every
paged cache layout (built synthetically, rows checked against the transformers readout), the
worker-side capture (fed batches shaped as vLLM's attention metadata), request routing and the
engine on the backend over a stand-in engine. vLLM itself runs in tests/integration/test_vllm_cpu.py.
"""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from recontext_engine import BackendUnavailableError, GenerationConfig, ReContextEngine
from recontext_engine.backends import create_backend
from recontext_engine.errors import ReContextError, UnsupportedModelError
from recontext_engine.readout.paged import scatter_to_paged
from recontext_engine.readout.vllm import (
    EXTENSION,
    SUPPORTED_VLLM,
    ModelInfo,
    VLLMBackend,
    merge_rank_results,
)
from recontext_engine.readout.vllm.admission import KVAdmission
from recontext_engine.readout.vllm.capture import WorkerCapture
from recontext_engine.readout.vllm.layouts import check_keys, cpu_key_order, key_cache, layout_of
from recontext_engine.readout.vllm.options import (
    CPU_KV_CACHE_BYTES,
    TRANSFORMERS_READOUT_GPU_SHARE,
    engine_arguments,
    sampling_arguments,
    split_options,
    unavailable_reason,
    version_supported,
)
from recontext_engine.readout.vllm.router import RequestRouter
from recontext_engine.readout.vllm.worker import install_capture, layer_index, sliding_window
from tests.paged_helpers import CUE, all_heads, random_ids, record_queries_keys, recorder, transformers_rows

ROOT = Path(__file__).resolve().parents[2]

# -- the backend contract and registry ------------------------------------------------------------


def test_registry_resolves_names_lazily_and_refuses_duplicates():
    from recontext_engine import protocol

    assert {"transformers", "vllm"} <= set(protocol.backend_names())
    assert protocol.backend_factory("transformers").__name__ == "create_transformers_runtime"
    with pytest.raises(ReContextError, match="unknown backend 'nope'"):
        create_backend("nope", None)
    with pytest.raises(ReContextError, match="already registered"):
        protocol.register_backend("vllm", lambda model, **options: None)
    calls = []
    protocol.register_backend("test-echo", lambda model, **options: calls.append((model, options)))
    try:
        create_backend("test-echo", "m", device="cpu")
        assert calls == [("m", {"device": "cpu"})]
    finally:
        protocol._REGISTRY.pop("test-echo")


def test_both_backends_satisfy_the_protocol():
    from recontext_engine.protocol import Backend
    from tests.paged_helpers import backend as tiny_backend

    transformers_backend = tiny_backend("llama")
    assert isinstance(transformers_backend, Backend) and not transformers_backend.batches
    assert transformers_backend.can_crop
    assert transformers_backend.eos_ids == {2}
    vllm_backend = VLLMBackend(
        fake_llm(CountingEngine()),
        ModelInfo(SimpleNamespace(eos_token_id=2), SimpleNamespace(eos_token_id=None)),
        sampling_params=FakeParams,
        tokens_prompt=dict,
        window=64,
    )
    assert isinstance(vllm_backend, Backend) and vllm_backend.batches and not vllm_backend.can_crop


# -- availability, options ------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_raises_backend_unavailable_with_install_hint():
    with pytest.raises(BackendUnavailableError, match=r"pip install 'recontext\[vllm\]'") as info:
        create_backend("vllm", None, tensor_parallel_size=1)
    assert SUPPORTED_VLLM in str(info.value)
    assert isinstance(info.value, ValueError)  # every ReContextError is a ValueError


def test_unavailable_reason_names_the_missing_part():
    assert "not installed" in unavailable_reason(False, "cuda")
    assert "not installed" in unavailable_reason(False, None)
    assert "runs on rocm" in unavailable_reason(True, "rocm")
    assert "no known platform" in unavailable_reason(True, None)
    assert unavailable_reason(True, "cuda") is None
    assert unavailable_reason(True, "cpu") is None


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.11.0", True),
        ("0.19.1rc1", True),
        ("0.33.0", True),
        ("0.34.0", False),
        ("0.10.2", False),
        ("1.0", False),
    ],
)
def test_version_range(version, ok):
    assert version_supported(version) is ok


def test_options_split_into_ours_and_engine_arguments():
    ours, engine = split_options(
        {
            "device": "cpu",
            "readout_device": "cuda:1",
            "dtype": "bfloat16",
            "readout": "paged",
            "tensor_parallel_size": 2,
            "max_model_len": 8192,
            "engine_args": {"enforce_eager": True, "max_model_len": 4096},
        }
    )
    assert ours == {"device": "cpu", "readout_device": "cuda:1", "dtype": "bfloat16", "readout": "paged"}
    # flat keywords win over the engine_args dict
    assert engine == {"enforce_eager": True, "max_model_len": 8192, "tensor_parallel_size": 2}


def test_engine_arguments_pass_through():
    args = engine_arguments(
        "/models/qwen",
        dtype="bfloat16",
        revision="abc",
        readout="paged",
        engine_args={"tensor_parallel_size": 4, "max_model_len": 32768, "swap_space": 0},
    )
    assert args == {
        "model": "/models/qwen",
        "tokenizer": "/models/qwen",
        "dtype": "bfloat16",
        "revision": "abc",
        "tensor_parallel_size": 4,
        "enable_prefix_caching": True,
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
        "worker_extension_cls": EXTENSION,
        "max_model_len": 32768,
        "swap_space": 0,
    }
    plain = engine_arguments("m")
    assert plain["dtype"] == "auto" and plain["tensor_parallel_size"] == 1
    assert plain["worker_extension_cls"] == EXTENSION  # the paged readout is the default
    assert "gpu_memory_utilization" not in plain and "kv_cache_memory_bytes" not in plain
    copy = engine_arguments("m", readout="transformers")
    assert copy["gpu_memory_utilization"] == TRANSFORMERS_READOUT_GPU_SHARE  # room for the readout copy
    assert "worker_extension_cls" not in copy
    assert engine_arguments("m", engine_args={"gpu_memory_utilization": 0.8})["gpu_memory_utilization"] == 0.8
    assert (
        engine_arguments("m", engine_args={"enable_prefix_caching": False})["enable_prefix_caching"] is False
    )


def test_cpu_sizes_the_kv_cache_in_bytes(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu = engine_arguments("m", platform="cpu")
    assert cpu["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES and "gpu_memory_utilization" not in cpu
    own = engine_arguments("m", platform="cpu", engine_args={"kv_cache_memory_bytes": 1 << 28})
    assert own["kv_cache_memory_bytes"] == 1 << 28
    assert "kv_cache_memory_bytes" not in engine_arguments(
        "m", platform="cpu", engine_args={"gpu_memory_utilization": 0.1}
    )
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # vLLM's own CPU setting wins
    assert "kv_cache_memory_bytes" not in engine_arguments("m", platform="cpu")


def test_worker_extension_resolves_to_this_module():
    module, _, name = EXTENSION.rpartition(".")
    assert getattr(importlib.import_module(module), name).__name__ == name


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"readout": "fast"}, "unknown readout"),
        ({"engine_args": {"model": "other"}}, "first argument"),
        ({"readout": "paged", "engine_args": {"worker_extension_cls": "x.Y"}}, "worker_extension_cls"),
        ({"engine_args": {"tensor_parallel_size": 0}}, "tensor_parallel_size"),
        ({"engine_args": {"kv_cache_dtype": "fp8"}}, "quantized"),
    ],
)
def test_engine_arguments_reject_conflicts(kwargs, match):
    with pytest.raises(ReContextError, match=match):
        engine_arguments("m", **kwargs)


def test_sampling_arguments():
    greedy = sampling_arguments(GenerationConfig(temperature=0.0, top_p=0.5), {2, 7}, 32)
    assert greedy == {"max_tokens": 32, "stop_token_ids": [2, 7], "detokenize": False, "temperature": 0.0}
    sampled = sampling_arguments(GenerationConfig(temperature=0.7, top_p=0.9, seed=5), [2], 0, stop=("\n\n",))
    assert sampled == {
        "max_tokens": 1,
        "stop_token_ids": [2],
        "detokenize": True,
        "stop": ["\n\n"],
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 5,
    }


def test_a_json_schema_becomes_vllm_structured_outputs_under_the_same_grammar():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    args = sampling_arguments(GenerationConfig(json_schema=schema), [2], 16)
    # disable_any_whitespace: the compact grammar recontext_engine.grammar builds for transformers
    assert args["structured_outputs"] == {"json": schema, "disable_any_whitespace": True}
    assert "structured_outputs" not in sampling_arguments(GenerationConfig(), [2], 16)
    made = []
    backend = VLLMBackend(
        fake_llm(CountingEngine()),
        ModelInfo(SimpleNamespace(eos_token_id=None), SimpleNamespace(eos_token_id=[9])),
        sampling_params=lambda **kw: made.append(kw),
        structured_outputs=lambda **kw: ("structured", kw),
        tokens_prompt=dict,
        window=64,
    )
    backend._params(args)
    assert made[-1]["structured_outputs"] == ("structured", {"json": schema, "disable_any_whitespace": True})


def test_layer_index():
    assert layer_index("model.layers.12.self_attn.attn") == 12
    assert layer_index("language_model.model.layers.0.self_attn.attn") == 0
    assert layer_index("lm_head") is None


def test_sliding_window_conventions():
    assert sliding_window(SimpleNamespace(sliding_window=(23, 0))) == 24  # FlashAttention: (w - 1, 0)
    assert sliding_window(SimpleNamespace(sliding_window=(-1, -1))) is None
    assert sliding_window(SimpleNamespace(sliding_window=-1)) is None  # the CPU backend's "no window"
    assert sliding_window(SimpleNamespace(sliding_window=24)) == 24
    assert sliding_window(SimpleNamespace(sliding_window=None)) is None


# -- paged cache layouts, built synthetically the way each vLLM backend writes them -----------------

BLOCKS, BLOCK_SIZE = 7, 16


def vec_order(block_size, head_size):  # the CPU kernel's "vec" packing: keys transposed per block
    return torch.arange(head_size)[None, :] * block_size + torch.arange(block_size)[:, None]


def pair_order(block_size, head_size):  # a VNNI-style packing: pairs of dims side by side per token
    d, t = torch.arange(head_size)[None, :], torch.arange(block_size)[:, None]
    return (d // 2) * block_size * 2 + t * 2 + d % 2


def packed_writer(order_fn):
    """A stand-in for the CPU kernel's ``cpu_attn_reshape_and_cache`` with a given packing."""

    def write(key, value, key_cache, value_cache, slots):
        blocks, heads, block_size, head_size = key_cache.shape
        region = key_cache.reshape(blocks, heads, block_size * head_size)  # a view: the key half
        order = order_fn(block_size, head_size)
        for i, slot in enumerate(slots.tolist()):
            region[slot // block_size, :, order[slot % block_size]] = key[i]

    return write


def write_layout(layout, keys, values, slots, packing=None):
    """A cache of ``layout`` holding ``keys``/``values`` (n, H, D) at ``slots``, as vLLM stores them."""
    n, heads, dim = keys.shape
    blocks, offsets = slots // BLOCK_SIZE, slots % BLOCK_SIZE
    if layout == "2_blocks":
        kv = torch.zeros(2, BLOCKS, BLOCK_SIZE, heads, dim)
        kv[0][blocks, offsets], kv[1][blocks, offsets] = keys, values
    elif layout == "blocks_2":
        kv = torch.zeros(BLOCKS, 2, BLOCK_SIZE, heads, dim)
        kv[:, 0][blocks, offsets], kv[:, 1][blocks, offsets] = keys, values
    elif layout == "heads_tokens_kv":
        kv = torch.zeros(BLOCKS, heads, BLOCK_SIZE, 2 * dim)
        kv[blocks, :, offsets] = torch.cat([keys, values], dim=-1)
    else:  # "cpu": (B, H, bs, 2D) viewed (B, H, 2 bs, D); keys in the first half, packed
        kv = torch.zeros(BLOCKS, heads, BLOCK_SIZE, 2 * dim)
        key_half, value_half = kv.view(BLOCKS, heads, 2 * BLOCK_SIZE, dim).chunk(2, dim=2)
        packed_writer(packing)(keys, values, key_half, value_half, slots)
        value_half[blocks, :, offsets] = values
    return kv


CPU_PACKINGS = {"vec": vec_order, "pairs": pair_order}
LAYOUT_CASES = [("2_blocks", None), ("blocks_2", None), ("heads_tokens_kv", None)] + [
    ("cpu", name) for name in CPU_PACKINGS
]


@pytest.mark.parametrize(("layout", "packing"), LAYOUT_CASES)
def test_each_layout_reads_the_transformers_rows(read_case, layout, packing):
    heads, expected, record = read_case
    impl_name = "CPUAttentionBackendImpl" if layout == "cpu" else "FlashAttentionImpl"
    table = torch.randperm(BLOCKS, generator=torch.Generator().manual_seed(3))[:4]
    positions = torch.arange(TOTAL)
    slots = table[positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE
    got = []
    for layer, rec in record.items():
        keys = rec["key"]
        kv = write_layout(layout, keys, -keys, slots, CPU_PACKINGS.get(packing))
        found = layout_of(impl_name, tuple(kv.shape), KV_HEADS, keys.shape[-1])
        assert found == layout
        order = (
            cpu_key_order(packed_writer(CPU_PACKINGS[packing]), kv.dtype, BLOCK_SIZE, keys.shape[-1])
            if packing
            else None
        )
        view = key_cache(kv, layout, KV_HEADS, keys.shape[-1], order)
        check_keys(view, keys, slots, layout)  # what the hook checks at every captured step
        capture = WorkerCapture()
        capture.arm({"total": TOTAL, "cue_window": CUE, "heads": [[layer, h] for h in range(Q_HEADS)]})
        capture.observe(
            layer, 0, rec["query"], view, [0, TOTAL], [TOTAL], table[None, :], rec["scaling"], None, None
        )
        got.append(capture.collect())
    rows, problems = merge_rank_results(got, heads, CUE, TOTAL)
    assert problems == []
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)


def test_a_cache_read_in_the_wrong_layout_fails_loudly(read_case):
    _, _, record = read_case
    keys = record[0]["key"]
    slots = torch.arange(TOTAL) + BLOCK_SIZE
    cpu = write_layout("cpu", keys, -keys, slots, vec_order)  # same shape as FlashAttention's 4-D cache
    assert layout_of("FlashAttentionImpl", tuple(cpu.shape), KV_HEADS, keys.shape[-1]) == "heads_tokens_kv"
    with pytest.raises(UnsupportedModelError, match="differ from the keys vLLM wrote"):
        check_keys(
            key_cache(cpu, "heads_tokens_kv", KV_HEADS, keys.shape[-1]), keys, slots, "heads_tokens_kv"
        )
    with pytest.raises(UnsupportedModelError, match="differ"):  # the CPU layout read without its packing
        check_keys(key_cache(cpu, "cpu", KV_HEADS, keys.shape[-1]), keys, slots, "cpu")
    padded = torch.cat([slots[:5], torch.tensor([-1])])  # padding slots are skipped
    order = vec_order(BLOCK_SIZE, keys.shape[-1])
    check_keys(key_cache(cpu, "cpu", KV_HEADS, keys.shape[-1], order), keys[:6], padded, "cpu")


def test_layouts_refuse_what_they_cannot_read():
    with pytest.raises(UnsupportedModelError, match="FlashInfer.*query_start_loc.*FLASH_ATTN"):
        layout_of("FlashInferImpl", (5, 2, 16, 2, 8), 2, 8)
    with pytest.raises(UnsupportedModelError, match="MLA"):
        layout_of("FlashMLAImpl", (5, 16, 576), 1, 576)
    with pytest.raises(UnsupportedModelError, match="unsupported paged KV layout"):
        layout_of("FlashAttentionImpl", (5, 16, 2, 8), 2, 8)
    with pytest.raises(UnsupportedModelError, match="unsupported paged KV layout"):
        layout_of("FlashAttentionImpl", (2, 5, 16, 3, 8), 2, 8)  # wrong number of key heads
    with pytest.raises(UnsupportedModelError, match="quantized"):
        key_cache(torch.zeros(5, 2, 16, 16).to(torch.float8_e4m3fn), "heads_tokens_kv", 2, 8)
    assert layout_of("FlashAttentionImpl", (2, 2, 16, 2, 8), 2, 8) == "blocks_2"  # two blocks: 5-D, ambiguous
    assert layout_of("TritonAttentionImpl", (5, 2, 16, 16), 2, 8) == "heads_tokens_kv"
    assert layout_of("CPUAttentionBackendImpl", (5, 2, 16, 16), 2, 8) == "cpu"


def test_cpu_key_order_maps_the_kernel_packing():
    for order_fn in (vec_order, pair_order):
        torch.testing.assert_close(
            cpu_key_order(packed_writer(order_fn), torch.bfloat16, 32, 64), order_fn(32, 64)
        )

    def lossy(key, value, key_cache, value_cache, slots):  # a kernel that drops half the dims
        key_cache[0, 0, : len(slots), :4] = key[:, 0, :4]

    with pytest.raises(UnsupportedModelError, match="could not be mapped"):
        cpu_key_order(lossy, torch.float32, 16, 8)


# -- the worker-side capture, fed as vLLM's worker feeds it ---------------------------------------

ARCH, PREFIX, SUFFIX = "llama", 45, 16
TOTAL = PREFIX + SUFFIX
Q_HEADS, KV_HEADS = 4, 2


@pytest.fixture(scope="module")
def read_case():
    ids = random_ids(TOTAL, seed=1)
    heads = all_heads()
    return heads, transformers_rows(ARCH, ids, heads, prefix=PREFIX), record_queries_keys(recorder(ARCH), ids)


def simulate_read(record, heads, steps, tp=1, other_len=30, spec_window=CUE):
    """Run one capture per tensor-parallel rank the way vLLM's worker would: each step is a batch
    holding a decode token of another sequence (``other_len`` keys) and a prefill chunk [a, b) of the
    read, with both sequences' keys at shuffled blocks of one paged cache."""
    spec = {"total": TOTAL, "cue_window": spec_window, "heads": [list(p) for p in heads.heads]}
    captures = [WorkerCapture() for _ in range(tp)]
    for capture in captures:
        capture.arm(spec)
    per_rank_q, per_rank_kv = Q_HEADS // tp, KV_HEADS // tp
    generator = torch.Generator().manual_seed(5)
    for layer, rec in record.items():
        head_dim = rec["key"].shape[-1]
        cache = torch.zeros(12, 16, KV_HEADS, head_dim)
        free = torch.randperm(12, generator=generator).tolist()
        cache, other_table = scatter_to_paged(
            torch.randn(other_len, KV_HEADS, head_dim), 16, key_cache=cache, free_blocks=free
        )
        cache, table = scatter_to_paged(rec["key"], 16, key_cache=cache, free_blocks=free)
        block_table = torch.full((2, 6), 11)
        block_table[0, : len(other_table)], block_table[1, : len(table)] = other_table, table
        for a, b in steps:
            query = torch.cat([torch.randn(1, Q_HEADS, head_dim), rec["query"][a:b]])  # (1 + b - a, q, d)
            for rank, capture in enumerate(captures):
                capture.observe(
                    layer,
                    rank * per_rank_q,
                    query[:, rank * per_rank_q : (rank + 1) * per_rank_q],
                    cache[:, :, rank * per_rank_kv : (rank + 1) * per_rank_kv],
                    [0, 1, 1 + b - a],
                    [other_len, b],
                    block_table,
                    rec["scaling"],
                    rec["softcap"],
                    rec["sliding_window"],
                )
    return [capture.collect() for capture in captures]


@pytest.mark.parametrize(
    ("steps", "tp"),
    [
        ([(0, TOTAL)], 1),  # the whole prompt in one step
        ([(0, PREFIX), (PREFIX, TOTAL)], 1),  # context cached, then only [E; q] computed
        ([(0, TOTAL - 5), (TOTAL - 5, TOTAL)], 2),  # chunked prefill splits the cue; two TP ranks
    ],
)
def test_worker_capture_equals_transformers_readout(read_case, steps, tp):
    heads, expected, record = read_case
    results = simulate_read(record, heads, steps, tp=tp)
    rows, problems = merge_rank_results(results, heads, CUE, TOTAL)
    assert problems == []
    assert rows.shape == expected.shape == (len(heads.heads), CUE, TOTAL)
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)


def test_worker_capture_reports_cue_queries_it_never_saw(read_case):
    heads, _, record = read_case
    # a prefix-cache hit up to the last two tokens: six cue queries were computed in an earlier request
    rows, problems = merge_rank_results(simulate_read(record, heads, [(TOTAL - 2, TOTAL)]), heads, CUE, TOTAL)
    assert rows is None and "no complete rows" in problems[-1]


def test_worker_capture_refuses_to_guess_between_sequences(read_case):
    heads, _, record = read_case
    results = simulate_read(record, heads, [(0, TOTAL)], other_len=TOTAL - 2)
    rows, problems = merge_rank_results(results, heads, CUE, TOTAL)
    assert rows is None and "2 sequences could be the read" in problems[0]


def test_worker_capture_tells_armed_reads_apart_by_request_id(read_case):
    """Two reads and a third request of the same length in one step: lengths cannot tell them apart,
    the batch's request ids (vLLM's, with a suffix of its own) do."""
    heads, expected, record = read_case
    spec = {"total": TOTAL, "cue_window": CUE, "heads": [list(p) for p in heads.heads]}
    batch = ["recontext-b-1f2e", "someone-else-77aa", "recontext-a-09cd"]
    capture = WorkerCapture(lambda: batch)
    capture.arm({**spec, "read_id": "recontext-a"})
    capture.arm({**spec, "read_id": "recontext-b"})
    generator = torch.Generator().manual_seed(6)
    for layer, rec in record.items():
        head_dim = rec["key"].shape[-1]
        cache = torch.zeros(16, 16, KV_HEADS, head_dim)
        free = torch.randperm(16, generator=generator).tolist()
        keys = [rec["key"], torch.randn(TOTAL, KV_HEADS, head_dim), rec["key"]]
        tables = []
        for sequence_keys in keys:
            cache, table = scatter_to_paged(sequence_keys, 16, key_cache=cache, free_blocks=free)
            tables.append(table)
        block_table = torch.full((3, 6), 15)
        for row, table in enumerate(tables):
            block_table[row, : len(table)] = table
        query = torch.cat([rec["query"], torch.randn(TOTAL, Q_HEADS, head_dim), rec["query"]])
        capture.observe(
            layer,
            0,
            query,
            cache,
            [0, TOTAL, 2 * TOTAL, 3 * TOTAL],
            [TOTAL, TOTAL, TOTAL],
            block_table,
            rec["scaling"],
            rec["softcap"],
            rec["sliding_window"],
        )
    for read_id in ("recontext-a", "recontext-b"):
        rows, problems = merge_rank_results([capture.collect(read_id)], heads, CUE, TOTAL)
        assert problems == []
        torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)
    assert not capture.armed


def test_unarmed_capture_collects_nothing():
    capture = WorkerCapture()
    capture.observe(
        0, 0, torch.randn(3, 4, 8), torch.zeros(2, 16, 2, 8), [0, 3], [3], torch.zeros(1, 1), 1.0, None, None
    )
    assert capture.collect() == {"rows": [], "error": None}


class FlashImplStandIn:
    """The attribute contract of vLLM's FlashAttentionImpl; ``forward`` writes this step's keys at
    their slots of the ``(2, blocks, block_size, kv_heads, dim)`` cache, as vLLM does first."""

    def __init__(self, scale, sliding_window):
        self.num_heads, self.num_kv_heads, self.head_size, self.scale = Q_HEADS, KV_HEADS, 16, scale
        self.logits_soft_cap = 0  # flash-attn's "none"
        self.sliding_window = (sliding_window - 1, 0) if sliding_window else (-1, -1)
        self.calls = 0

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None):
        self.calls += 1
        n = attn_metadata.num_actual_tokens
        kv_cache[0].view(-1, self.num_kv_heads, self.head_size)[attn_metadata.slot_mapping[:n]] = key[:n]
        return output


def test_wrapped_attention_layers_capture_through_vllm_call_shapes():
    arch = "mistral"  # a sliding window of 24: vLLM hands it over as (23, 0)
    ids = random_ids(TOTAL, seed=2)
    heads = all_heads()
    expected = transformers_rows(arch, ids, heads, prefix=PREFIX)
    record = record_queries_keys(recorder(arch), ids)
    state = WorkerCapture()
    modules = [("model.embed_tokens", SimpleNamespace(weight=None))]
    for layer, rec in record.items():
        impl = FlashImplStandIn(rec["scaling"], rec["sliding_window"])
        modules.append(
            (f"model.layers.{layer}.self_attn.attn", SimpleNamespace(impl=impl, num_kv_heads=KV_HEADS))
        )
    assert install_capture(modules, state) == [0, 1, 2]
    assert install_capture(modules, state) == [0, 1, 2]  # idempotent: wrapped once
    with pytest.raises(UnsupportedModelError, match="no attention layers"):
        install_capture(modules[:1], state)
    table = torch.randperm(10, generator=torch.Generator().manual_seed(4))[:4]
    caches = {layer: torch.zeros(2, 10, 16, KV_HEADS, 16) for layer in record}
    state.arm({"total": TOTAL, "cue_window": CUE, "heads": [list(p) for p in heads.heads]})
    for a, b in [(0, 50), (50, TOTAL)]:  # chunked prefill; 3 rows of CUDA-graph padding each step
        positions = torch.arange(a, b)
        metadata = SimpleNamespace(
            num_actual_tokens=b - a,
            query_start_loc=torch.tensor([0, b - a], dtype=torch.int32),
            seq_lens=torch.tensor([b], dtype=torch.int32),
            block_table=table[None, :],
            slot_mapping=table[positions // 16] * 16 + positions % 16,
        )
        for (_, module), (layer, rec) in zip(modules[1:], record.items(), strict=True):
            query = torch.cat([rec["query"][a:b].reshape(b - a, -1), torch.zeros(3, Q_HEADS * 16)])
            key = torch.cat([rec["key"][a:b], torch.zeros(3, KV_HEADS, 16)])
            module.impl.forward(module, query, key, key, caches[layer], metadata)
    rows, problems = merge_rank_results([state.collect()], heads, CUE, TOTAL)
    assert problems == []
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)
    assert all(module.impl.calls == 2 for _, module in modules[1:])


# -- request routing --------------------------------------------------------------------------------


@dataclass
class FakeParams:
    """Holds SamplingParams' keywords."""

    max_tokens: int = 16
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    detokenize: bool = True
    stop: list[str] = field(default_factory=list)
    top_p: float = 1.0
    seed: int | None = None


def _output(request_id, tokens, finished):
    return SimpleNamespace(
        request_id=request_id, finished=finished, outputs=[SimpleNamespace(token_ids=list(tokens))]
    )


class CountingEngine:
    """vLLM's ``LLMEngine`` contract; each step appends ``last + 1`` to every running request
    (cumulative outputs, as vLLM's default), and reports ids with a suffix, as some versions do."""

    def __init__(self):
        self.requests, self.steps, self.aborted = {}, 0, []

    def add_request(self, request_id, prompt, params):
        self.requests[request_id] = (list(prompt["prompt_token_ids"]), params, [])

    def has_unfinished_requests(self):
        return bool(self.requests)

    def abort_request(self, ids):
        self.aborted += ids
        for rid in ids:
            self.requests.pop(rid, None)

    def step(self):
        self.steps += 1
        outputs = []
        for rid, (prompt, params, out) in list(self.requests.items()):
            out.append((out or prompt)[-1] + 1)
            done = len(out) >= params.max_tokens or out[-1] in params.stop_token_ids
            outputs.append(_output(rid + "-0", out, done))
            if done:
                del self.requests[rid]
        return outputs


def test_router_interleaves_requests_and_aborts_abandoned_ones():
    engine = CountingEngine()
    router = RequestRouter(engine, threading.RLock())
    a = router.add({"prompt_token_ids": [10]}, FakeParams(max_tokens=3))
    b = router.add({"prompt_token_ids": [100]}, FakeParams(max_tokens=5))
    stream_b = router.outputs(b)
    first_b = next(stream_b)  # this step also advanced a
    assert list(first_b.outputs[0].token_ids) == [101]
    final = router.run([a])  # a's first output waited in its inbox
    assert list(final[a].outputs[0].token_ids) == [11, 12, 13]
    assert [list(o.outputs[0].token_ids) for o in stream_b][-1] == [101, 102, 103, 104, 105]
    c = router.add({"prompt_token_ids": [0]}, FakeParams(max_tokens=50))
    next(router.outputs(c))
    router.abort(c)
    assert engine.aborted == [c] and not engine.has_unfinished_requests()


def test_router_drain_keeps_outputs_for_their_owners():
    engine = CountingEngine()
    router = RequestRouter(engine, threading.RLock())
    a = router.add({"prompt_token_ids": [1]}, FakeParams(max_tokens=4))
    router.drain()
    assert not engine.has_unfinished_requests()
    assert [list(o.outputs[0].token_ids) for o in router.outputs(a)][-1] == [2, 3, 4, 5]


def fake_llm(engine, **extra):
    return SimpleNamespace(llm_engine=engine, **extra)


def test_backend_generation_on_the_router():
    backend = VLLMBackend(
        fake_llm(CountingEngine()),
        ModelInfo(SimpleNamespace(eos_token_id=None), SimpleNamespace(eos_token_id=[9, 60])),
        readout="paged",
        sampling_params=FakeParams,
        tokens_prompt=dict,
        window=64,
    )
    assert backend.eos_ids == {9, 60}
    cache = backend.prefill([1, 2])
    config = GenerationConfig(max_new_tokens=10)
    assert list(backend.generate(cache, [5], config, {9})) == [6, 7, 8]  # stops before the end token
    assert backend.generate_batch([[1, 2, 5], [50]], config) == [
        [6, 7, 8],
        [51, 52, 53, 54, 55, 56, 57, 58, 59],
    ]
    long = list(
        backend.generate(backend.prefill(list(range(60))), [5], GenerationConfig(max_new_tokens=10), set())
    )
    assert long == [6, 7, 8]  # the window leaves room for three tokens
    with pytest.raises(ReContextError, match="window"):
        list(backend.generate(backend.prefill(list(range(64))), [], config, set()))
    with pytest.raises(ReContextError, match="needs a TransformersBackend"):
        VLLMBackend(
            fake_llm(CountingEngine()),
            backend.model,
            readout="transformers",
            sampling_params=FakeParams,
            tokens_prompt=dict,
            window=64,
        )


# -- the engine on the backend (embedded model) -----------------------------------------------------


class GreedyEngine:
    """Stands in for vLLM's engine over a transformers backend: greedy, one token per running request
    per step, cumulative outputs. Only for checking the backend's side of the contract on the CPU."""

    def __init__(self, backend):
        self.backend, self.requests = backend, {}

    def add_request(self, request_id, prompt, params):
        assert params.temperature == 0.0 and params.detokenize is False
        self.requests[request_id] = {
            "ids": list(prompt["prompt_token_ids"]),
            "params": params,
            "out": [],
            "cache": None,
        }

    def has_unfinished_requests(self):
        return bool(self.requests)

    def abort_request(self, ids):
        for rid in ids:
            self.requests.pop(rid, None)

    def step(self):
        outputs = []
        for rid, r in list(self.requests.items()):
            if r["cache"] is None:
                r["cache"] = self.backend.new_cache()
                logits = self.backend.next_logits(r["cache"], r["ids"])
            else:
                logits = self.backend.next_logits(r["cache"], r["out"][-1:])
            r["out"].append(int(torch.argmax(logits)))
            done = len(r["out"]) >= r["params"].max_tokens or r["out"][-1] in r["params"].stop_token_ids
            outputs.append(_output(rid, r["out"], done))
            if done:
                del self.requests[rid]
        return outputs


CONTEXT = (
    "The harbour office opens at seven. Mira Voss keeps the keys to the blue warehouse. "
    "The ferry to the island leaves twice a day. Tomas Brandt repairs the cranes on Mondays. "
    "The canteen serves fish soup on Fridays. The lighthouse was painted red last spring."
)
QUESTION = "Who keeps the keys to the blue warehouse?"


@pytest.fixture(scope="module")
def vllm_engine(engine):
    model = engine.backend.model
    backend = VLLMBackend(
        fake_llm(GreedyEngine(engine.backend)),
        ModelInfo(model.config, model.generation_config),
        readout="transformers",
        transformers_backend=engine.backend,
        sampling_params=FakeParams,
        tokens_prompt=dict,
        window=engine.backend.window,
    )
    return ReContextEngine(backend, engine.tokenizer, engine.heads, model_name=engine.model_name)


@pytest.mark.model
@pytest.mark.parametrize("rounds", [0, 1])
def test_engine_on_the_vllm_backend_matches_transformers(engine, vllm_engine, rounds):
    options = {"rounds": rounds, "top_k": 2, "max_new_tokens": 8}
    want = engine.answer(CONTEXT, QUESTION, **options)
    got = vllm_engine.answer(CONTEXT, QUESTION, **options)
    assert got.text == want.text and got.text
    assert got.evidence == want.evidence
    # cached_tokens aside: the transformers engine's context cache holds the context by the second call
    assert replace(got.usage, cached_tokens=0) == replace(want.usage, cached_tokens=0)
    assert got.finish_reason == want.finish_reason
    if rounds:
        assert got.evidence


@pytest.mark.model
def test_interleaved_streams_and_batch_match_one_at_a_time(vllm_engine):
    options = {"rounds": 0, "max_new_tokens": 4}
    questions = [QUESTION, "When does the harbour office open?"]
    alone = [vllm_engine.answer(CONTEXT, q, **options).text for q in questions]
    streams = [vllm_engine.stream(CONTEXT, q, **options) for q in questions]
    pieces = [[], []]
    active = [0, 1]
    while active:  # alternate: both requests run in the stand-in engine at once
        for i in list(active):
            try:
                pieces[i].append(next(streams[i]))
            except StopIteration:
                active.remove(i)
    assert ["".join(p) for p in pieces] == alone
    prompts = []
    config = vllm_engine.default_config.with_options(**options)
    for q in questions:
        request = vllm_engine._start(CONTEXT, q, config)
        prompts.append(request.prefix.ids + vllm_engine.prompts.suffix(request.prefix, q, [], config).ids)
    batch = vllm_engine.backend.generate_batch(prompts, config.generation)
    assert [vllm_engine.tokenizer.decode(t, skip_special_tokens=True) for t in batch] == alone


@pytest.mark.model
def test_calls_that_read_wait_for_kv_room_and_others_do_not(vllm_engine, monkeypatch):
    backend = vllm_engine.backend
    config = vllm_engine.default_config.with_options(rounds=1, top_k=2, max_new_tokens=4)
    need = len(vllm_engine._start(CONTEXT, QUESTION, config).prefix.ids) + 4
    evidence = vllm_engine.select_evidence(CONTEXT, QUESTION, config)
    monkeypatch.setattr(backend, "kv_admission", KVAdmission(need))  # room for one call
    first = vllm_engine.stream(CONTEXT, QUESTION, config)
    next(first)  # selected and generating: it holds the room
    assert backend.kv_admission.held == need
    second = vllm_engine.stream(CONTEXT, "When does the harbour office open?", config)
    got: list[str] = []
    waiting = threading.Thread(target=lambda: got.append("".join(second)), daemon=True)
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive() and backend.kv_admission.waiting == 1 and not got
    # calls that do not read (vanilla, given evidence) are one pass each: not held back
    assert vllm_engine.answer(CONTEXT, QUESTION, config, rounds=0).text
    assert vllm_engine.answer(CONTEXT, QUESTION, config, evidence=evidence).text
    "".join(first)  # the first call ends and frees its room
    waiting.join(60)
    assert got and got[0] and backend.kv_admission.held == 0
    gc.disable()  # a stream dropped unfinished is freed by reference counting, its room with it
    try:
        dropped = vllm_engine.stream(CONTEXT, QUESTION, config)
        next(dropped)
        assert backend.kv_admission.held == need
        del dropped
        assert backend.kv_admission.held == 0
    finally:
        gc.enable()


# -- the GPU check's CPU parts ----------------------------------------------------------------------


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "paged readout on cpu" in proc.stdout and "RESULT " in proc.stdout
    import json

    summary = json.loads(out.read_text())
    assert summary["paged"]["passed"] and summary["paged"]["max_abs_diff"] < 1e-4
    assert summary["vllm_check"] == "skipped (dry run)"


def test_gpu_check_shell_script_parses():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    help_text = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "--prepare" in help_text.stdout
