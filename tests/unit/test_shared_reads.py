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
