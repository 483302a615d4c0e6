"""Read passes that share tokens (one tree-masked forward) against separate reads, on tiny random models."""

from __future__ import annotations

import pytest
import torch

from recontext_engine.heads.headset import HeadSet
from recontext_engine.readout.transformers import TransformersBackend
from tests.tiny_models import ARCHITECTURES, tiny_model

HEADS = HeadSet(((0, 1), (1, 3), (2, 0), (2, 2)))


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize(
    ("shared", "lengths"),
    [
        (12, (9, 5)),
        (0, (10, 10)),
        (7, (3, 12, 1)),
    ],  # branches shorter than the cue reach into the shared part
)
def test_branches_read_in_one_pass_equal_separate_reads(arch: str, shared: int, lengths: tuple) -> None:
    torch.manual_seed(4)
    backend = TransformersBackend(tiny_model(arch))
    prefix = torch.randint(3, 128, (30,)).tolist()
    shared_ids = torch.randint(3, 128, (shared,)).tolist()
    branches = [torch.randint(3, 128, (n,)).tolist() for n in lengths]
    cache = backend.prefill(prefix)
    before = [layer.keys.clone() for layer in cache.layers]
    together = backend.read_branches(cache, 30, shared_ids, branches, HEADS, cue_window=6)
    assert cache.get_seq_length() == 30
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys)
    for branch, rows in zip(branches, together):
        alone = backend.read(cache, 30, shared_ids + branch, HEADS, cue_window=6)
        assert (
            rows.shape
            == alone.shape
            == (len(HEADS.heads), min(6, shared + len(branch)), 30 + shared + len(branch))
        )
        torch.testing.assert_close(rows, alone, atol=2e-5, rtol=1e-4)


def test_one_pass_is_used_where_no_layer_has_a_sliding_window() -> None:
    assert TransformersBackend(tiny_model("llama")).shares_reads
    assert not TransformersBackend(tiny_model("mistral")).shares_reads


def test_a_branch_without_tokens_is_refused() -> None:
    backend = TransformersBackend(tiny_model("llama"))
    with pytest.raises(ValueError, match="at least one token"):
        backend.read_branches(backend.prefill([5, 6]), 2, [7], [[8], []], HEADS, cue_window=2)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("branched", [False, True])
def test_a_kept_read_leaves_the_cache_a_prefill_would(arch: str, branched: bool) -> None:
    """After ``keep``, the cache holds ``[prefix; suffix]`` (every layer, right positions): the next
    token's logits equal those after prefilling the same ids; ``crop`` goes back to any length."""
    torch.manual_seed(5)
    backend = TransformersBackend(tiny_model(arch))
    deep = HeadSet(((0, 1),))  # a head in the first layer: a plain read would stop there
    prefix = torch.randint(3, 128, (30,)).tolist()
    shared, question, other = [torch.randint(3, 128, (n,)).tolist() for n in (9, 6, 4)]
    cache = backend.prefill(prefix)
    if branched:
        rows = backend.read_branches(cache, 30, shared, [question, other], deep, cue_window=4, keep=True)[0]
    else:
        rows = backend.read(cache, 30, shared + question, deep, cue_window=4, keep=True)
    assert cache.get_seq_length() == 30 + len(shared) + len(question)
    torch.testing.assert_close(rows, backend.read(backend.prefill(prefix), 30, shared + question, deep, 4))
    fresh = backend.prefill(prefix + shared + question)
    torch.testing.assert_close(
        backend.next_logits(cache, [7]), backend.next_logits(fresh, [7]), atol=2e-5, rtol=1e-4
    )
    backend.crop(cache, 30 + len(shared))
    torch.testing.assert_close(
        backend.next_logits(cache, other),
        backend.next_logits(backend.prefill(prefix + shared), other),
        atol=2e-5,
        rtol=1e-4,
    )
