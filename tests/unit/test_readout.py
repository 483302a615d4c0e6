"""The transformers readout against a slow reference, on tiny random models of each architecture."""

from __future__ import annotations

import pytest
import torch
import transformers

from recontext_engine import GenerationConfig
from recontext_engine.errors import UnsupportedModelError
from recontext_engine.heads.headset import HeadSet
from recontext_engine.readout.transformers import ReservedLayer, TransformersBackend, cue_attention_rows
from tests.tiny_models import ARCHITECTURES, tiny_model

HEADS = HeadSet(((0, 1), (1, 3), (2, 0), (2, 2), (1, 2)))  # heads 2 and 3 share a key head (GQA 4:2)


def reference_rows(arch: str, ids: torch.Tensor, heads: HeadSet, w: int) -> torch.Tensor:
    """Full eager attention over the whole prompt, then the chosen heads' last w rows."""
    model = tiny_model(arch, "eager")
    with torch.no_grad():
        attentions = model(ids[None], output_attentions=True).attentions
    return torch.stack([attentions[layer][0, head, -w:, :] for layer, head in heads.heads])


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("prefix_len", [0, 17, 40])
def test_readout_equals_full_eager_attention(arch: str, prefix_len: int) -> None:
    torch.manual_seed(1)
    ids = torch.randint(3, 128, (60,))  # longer than the sliding window of 24 where there is one
    backend = TransformersBackend(tiny_model(arch))
    cache = backend.prefill(ids[:prefix_len].tolist())
    rows = backend.read(cache, prefix_len, ids[prefix_len:].tolist(), HEADS, cue_window=8)
    expected = reference_rows(arch, ids, HEADS, 8)
    assert rows.shape == (len(HEADS.heads), 8, 60)
    torch.testing.assert_close(rows, expected, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(rows.sum(-1), torch.ones(len(HEADS.heads), 8))


def test_read_pass_restores_the_context_cache_and_stops_early() -> None:
    backend = TransformersBackend(tiny_model("llama"))
    ids = list(range(3, 43))
    cache = backend.prefill(ids[:30])
    before = [layer.keys.clone() for layer in cache.layers]
    backend.read(cache, 30, ids[30:], HeadSet(((0, 1),)), cue_window=4)
    assert cache.get_seq_length() == 30
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys)


def test_generation_grows_the_cache_once_to_what_it_can_use() -> None:

    backend = TransformersBackend(tiny_model("llama"))
    cache = backend.prefill(list(range(3, 43)))
    reserve = ReservedLayer.RESERVE
    assert {layer._buffers[0].shape[-2] for layer in cache.layers} == {40 + reserve}
    suffix = [7] * (reserve - 10)  # a long replayed suffix: suffix plus answer pass the reserve
    config = GenerationConfig(max_new_tokens=30)
    before = [layer.keys.clone() for layer in cache.layers]
    tokens = list(backend.generate(cache, suffix, config, eos_ids=set()))
    assert len(tokens) == 30
    # One growth to prompt + answer, not prompt + suffix + another reserve.
    assert {layer._buffers[0].shape[-2] for layer in cache.layers} == {40 + len(suffix) + 30}
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys[..., :40, :], keys)


def test_stop_after_the_deepest_layer_skips_later_layers() -> None:
    model = tiny_model("llama")
    backend = TransformersBackend(model)
    cache = backend.prefill([5, 6, 7])
    calls: list[int] = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args, i=i: calls.append(i))
        for i, layer in enumerate(model.model.layers)
    ]
    try:
        backend.read(cache, 3, [8, 9, 10], HeadSet(((1, 0),)), cue_window=2)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == [0, 1]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma2"])
def test_reusing_the_context_cache_gives_the_same_next_token_logits(arch: str) -> None:
    model = tiny_model(arch)
    backend = TransformersBackend(model)
    torch.manual_seed(2)
    ids = torch.randint(3, 128, (50,)).tolist()
    cache = backend.prefill(ids[:35])
    backend.read(cache, 35, ids[35:45], HeadSet(((2, 1),)), cue_window=4)  # a read pass in between
    reused = backend.next_logits(cache, ids[35:])
    with torch.no_grad():
        full = model(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(reused, full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3", "phi3"])
def test_grouped_keys_read_in_place_give_the_models_own_output(arch: str, monkeypatch) -> None:
    """On CPU the readout hands grouped keys and the mask to SDPA as they are (no repeat_kv copy):
    logits after a cached prefix equal those of the model's own SDPA attention."""
    torch.manual_seed(4)
    ids = torch.randint(3, 128, (50,)).tolist()
    plain = tiny_model(arch)
    with torch.no_grad():
        expected = plain(torch.tensor([ids])).logits[0, -1]
    backend = TransformersBackend(tiny_model(arch))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    grouped: list[bool] = []

    def recorded(*args, **kwargs):
        grouped.append(bool(kwargs.get("enable_gqa")))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    cache = backend.prefill(ids[:30])
    logits = backend.next_logits(cache, ids[30:])  # 20 tokens after a cached prefix: a mask is given
    assert any(grouped)
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def test_cue_rows_match_manual_softmax_with_gqa() -> None:
    torch.manual_seed(3)
    query = torch.randn(1, 4, 5, 8)
    key = torch.randn(1, 2, 9, 8)
    rows = cue_attention_rows(query, key, torch.tensor([3]), cue_window=2, scaling=0.5)
    q = query[0, 3, -2:]
    k = key[0, 1]  # query head 3 reads key head 3 // 2
    logits = (q @ k.T) * 0.5
    positions = torch.arange(9)
    mask = positions[None, :] <= torch.tensor([7, 8])[:, None]
    expected = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1)
    torch.testing.assert_close(rows[0], expected)


def test_an_architecture_without_readable_attention_is_refused_by_name() -> None:
    config = transformers.MambaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=4)
    model = transformers.MambaForCausalLM(config).eval()
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM"):
        TransformersBackend(model)
