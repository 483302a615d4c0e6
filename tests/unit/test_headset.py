"""Head sets: JSON round trip, clear errors for wrong heads and wrong models, the bundled sets."""

from __future__ import annotations

import json

import pytest
import transformers

from recontext_engine import HeadSet, HeadSetError
from recontext_engine.heads.headset import model_fingerprint
from recontext_engine.heads.registry import bundled_head_sets, lookup, resolve_heads


def tiny_config(
    layers: int = 2, heads: int = 4, kv_heads: int | None = None, hidden: int | None = None, vocab: int = 64
) -> transformers.LlamaConfig:
    """A Llama config of this attention geometry (what fingerprints hash), without weights."""
    return transformers.LlamaConfig(
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        hidden_size=hidden or 16 * heads,
        intermediate_size=32,
        vocab_size=vocab,
    )


def smollm2_config() -> transformers.LlamaConfig:
    """The embedded model's geometry (SmolLM2-135M-Instruct), without its weights."""
    return tiny_config(layers=30, heads=9, kv_heads=3, hidden=576, vocab=49152)


def test_json_round_trip_keeps_heads_order_and_provenance(tmp_path):
    config = tiny_config()
    provenance = {"cue_window": 8, "decay": 0.75, "head_scores": [{"head": [1, 2], "score": 0.25}]}
    head_set = HeadSet(((1, 2), (0, 3), (1, 0)), "tiny", model_fingerprint(config), provenance)
    path = tmp_path / "heads.json"
    head_set.save(path)
    loaded = HeadSet.load(path)
    assert loaded == head_set
    assert loaded.heads == ((1, 2), (0, 3), (1, 0))
    assert loaded.provenance == provenance
    assert loaded.max_layer == 1
    assert json.loads(path.read_text())["heads"] == [[1, 2], [0, 3], [1, 0]]
    loaded.validate_for(config)  # fits the model it was made for


@pytest.mark.parametrize(
    ("heads", "where"),
    [(((2, 0),), "(2, 0)"), (((0, 4),), "(0, 4)"), (((-1, 0),), "(-1, 0)"), (((1, 1), (0, 9)), "(0, 9)")],
)
def test_head_out_of_range_is_a_clear_error(heads, where):
    with pytest.raises(HeadSetError) as info:
        HeadSet(heads).validate_for(tiny_config())
    message = str(info.value)
    assert where in message
    assert "out of range" in message and "2 layers x 4 heads" in message


def test_out_of_range_heads_are_refused_through_resolve_heads():
    with pytest.raises(HeadSetError, match=r"\(5, 0\) is out of range"):
        resolve_heads([(0, 1), (5, 0)], tiny_config())


def test_fingerprint_mismatch_is_refused_with_a_clear_message():
    made_for = tiny_config(layers=3)
    head_set = HeadSet(((0, 1),), "tiny-3-layers", model_fingerprint(made_for))
    with pytest.raises(HeadSetError) as info:
        head_set.validate_for(tiny_config(layers=2))
    message = str(info.value)
    assert "tiny-3-layers" in message and "another model" in message
    assert model_fingerprint(made_for) in message and model_fingerprint(tiny_config()) in message
    assert "recontext heads detect" in message
    head_set.validate_for(tiny_config(layers=2), check_fingerprint=False)  # explicit opt-out works


def test_bundled_set_for_another_model_is_refused(tmp_path):
    qwen = next(hs for hs in bundled_head_sets() if hs.model == "Qwen/Qwen3-4B")
    same_shape_other_model = tiny_config(layers=36, heads=32)  # every head index exists here
    with pytest.raises(HeadSetError, match="made for another model"):
        qwen.validate_for(same_shape_other_model)
    path = tmp_path / "qwen.json"
    qwen.save(path)
    with pytest.raises(HeadSetError, match="made for another model"):
        resolve_heads(str(path), same_shape_other_model)
    with pytest.raises(HeadSetError, match="out of range"):
        resolve_heads(str(path), smollm2_config())


@pytest.mark.parametrize(
    ("text", "match"),
    [("{not json", "not valid JSON"), ('{"model": "x"}', "'heads' list"), ('{"heads": []}', "at least one")],
)
def test_bad_files_are_clear_errors(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(HeadSetError, match=match):
        HeadSet.load(path)


def test_missing_file_and_duplicates_are_clear_errors(tmp_path):
    with pytest.raises(HeadSetError, match="not found"):
        HeadSet.load(tmp_path / "absent.json")
    with pytest.raises(HeadSetError, match="twice"):
        HeadSet(((0, 1), (0, 1)))
    with pytest.raises(HeadSetError, match="pairs of integers"):
        HeadSet((("a", 1),))


def test_bundled_embedded_model_set_is_detected_with_full_provenance():
    config = smollm2_config()
    head_set = lookup(config)
    assert head_set is not None and head_set.model == "SmolLM2-135M-Instruct"
    head_set.validate_for(config)
    assert len(head_set.heads) == 16
    prov = head_set.provenance
    assert prov["fingerprint"] == model_fingerprint(config)
    assert prov["model"]["name"] == "SmolLM2-135M-Instruct"
    assert len(prov["model"]["file_sha256"]) == 64
    assert prov["cue_window"] == 8 and prov["decay"] == 0.75
    assert prov["calibration"]["cases"] >= 24 and prov["calibration"]["seed"] == 0
    assert len(prov["calibration"]["families"]) == 6
    scored = [tuple(s["head"]) for s in prov["head_scores"]]
    assert scored == list(head_set.heads)
    matrix = prov["score_matrix"]
    assert len(matrix) == 30 and all(len(row) == 9 for row in matrix)


def test_auto_detects_once_then_uses_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECONTEXT_CACHE", str(tmp_path))
    config = tiny_config(layers=3)
    calls = []

    def detect() -> HeadSet:
        calls.append(1)
        return HeadSet(((2, 1), (0, 0)), "tiny", model_fingerprint(config))

    first = resolve_heads("auto", config, detect=detect)
    second = resolve_heads("auto", config, detect=detect)
    assert first.heads == second.heads == ((2, 1), (0, 0))
    assert calls == [1]
    assert (tmp_path / "heads" / f"{model_fingerprint(config)}.json").is_file()


def test_auto_without_a_known_set_or_detector_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("RECONTEXT_CACHE", str(tmp_path))
    with pytest.raises(HeadSetError, match="recontext heads detect"):
        resolve_heads("auto", tiny_config(layers=5))
