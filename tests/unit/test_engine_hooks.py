"""Engine hooks for UIs, on a tiny random Llama: ``on_evidence`` before generation, the prefill bar."""

from __future__ import annotations

import random
import re

import pytest
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from recontext_engine import Evidence, HeadSet, ReContextEngine, ReplayConfig
from recontext_engine.readout.transformers import TransformersBackend
from tests.documents import OBJECTS, SUBJECTS, TAILS, VERBS, filler
from tests.tiny_models import tiny_model

CONFIG = ReplayConfig(rounds=2, top_k=2, question_template="Question: {question}").with_options(
    max_new_tokens=4
)
QUESTION = "Who repaired the old bridge?"


def _tokenizer() -> transformers.PreTrainedTokenizerFast:
    words = {
        w for text in [*SUBJECTS, *VERBS, *OBJECTS, *TAILS, QUESTION] for w in re.findall(r"\w+|\S", text)
    }
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for word in sorted(words | {"Question", "Context", "N/A", ":", "?"}):
        vocab.setdefault(word, len(vocab))
    assert len(vocab) <= 128  # the tiny model's vocabulary
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )


def tiny_engine() -> ReContextEngine:
    """An engine over a tiny random Llama (a 512-token window) with a word-level tokenizer."""
    backend = TransformersBackend(tiny_model("llama"), prefill_chunk=32)
    return ReContextEngine(backend, _tokenizer(), HeadSet(((1, 0), (2, 1))), model_name="tiny")


def tiny_documents() -> list[str]:
    rng = random.Random(5)
    return [" ".join(filler(rng, 12)), " ".join(filler(rng, 8))]


@pytest.fixture(scope="module")
def engine() -> ReContextEngine:
    return tiny_engine()


@pytest.fixture
def documents() -> list[str]:
    return tiny_documents()


@pytest.fixture
def calls(engine, monkeypatch) -> list:
    """Every ``on_evidence`` call and the start of generation, in order."""
    log: list = []
    generate = engine.backend.generate

    def recorded(*args, **kwargs):
        log.append(("generate",))
        yield from generate(*args, **kwargs)

    monkeypatch.setattr(engine.backend, "generate", recorded)
    return log


def test_on_evidence_is_called_once_after_selection_and_before_generation(engine, documents, calls) -> None:
    stream = engine.stream(documents, QUESTION, CONFIG, on_evidence=lambda e: calls.append(("evidence", e)))
    assert calls == []  # selection waits for the first next(): the caller can still attach a UI
    pieces = []
    for piece in stream:
        calls.append(("piece", piece))
        pieces.append(piece)
    assert [c[0] for c in calls[:2]] == ["evidence", "generate"]
    assert [c[0] for c in calls].count("evidence") == 1
    given = calls[0][1]
    assert given and given == stream.result.evidence
    assert all(documents[e.doc_index][e.char_start : e.char_end] == e.text for e in given)
    assert "".join(pieces) == stream.result.text


def test_answer_passes_it_through_and_vanilla_and_given_evidence_report_what_is_replayed(
    engine, documents, calls
) -> None:
    seen: list[list[Evidence]] = []
    vanilla = engine.answer(documents, QUESTION, CONFIG, rounds=0, on_evidence=seen.append)
    assert seen == [[]] and vanilla.evidence == []
    mine = [Evidence(documents[1][:10], 1, 0, 10, 1.0, 1)]
    engine.answer(documents, QUESTION, CONFIG, evidence=mine, on_evidence=seen.append)
    assert seen[1] == mine and [c[0] for c in calls] == ["generate", "generate"]


def test_an_exception_in_the_hook_stops_before_generation(engine, documents, calls) -> None:
    def fail(_evidence):
        raise RuntimeError("ui gone")

    with pytest.raises(RuntimeError, match="ui gone"):
        engine.answer(documents, QUESTION, CONFIG, on_evidence=fail)
    assert calls == []


def test_the_result_keeps_documents_and_question_for_the_view(engine, documents) -> None:
    res = engine.answer(documents, QUESTION, CONFIG)
    assert res.documents == documents and res.question == QUESTION
    assert "documents" not in res.to_dict() and "question" not in res.to_dict()
    assert 'class="rcx-text"' in res._repr_html_()


def test_prefill_progress_bar_only_when_asked_and_only_over_one_chunk(engine, capsys) -> None:
    backend = engine.backend
    ids = [5] * 100  # 4 chunks of 32
    backend.prefill(ids)
    assert capsys.readouterr().err == ""  # off by default in library calls
    backend.progress = True
    try:
        backend.prefill(ids)
        err = capsys.readouterr().err
        assert "recontext: prefill" in err and "/100" in err
        backend.prefill(ids[:20])  # one chunk: nothing to show
        assert capsys.readouterr().err == ""
    finally:
        backend.progress = False
