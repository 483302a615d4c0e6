"""Language detection, script-independent BM25 terms, per-language sentences and the multilingual tasks."""

from __future__ import annotations

import pytest

from recontext_engine import ReplayConfig
from recontext_engine.bench.tasks import MULTILINGUAL_TASKS, TASKS, generate_case
from recontext_engine.errors import ReContextError
from recontext_engine.language import detect_language, documents_language
from recontext_engine.lexical import bm25_scores, lexical_tokens, recursive_bm25_scores
from recontext_engine.spans import document_sentences, split_sentences


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The dog sleeps in the garden and the cat is on the roof.", "en"),
        ("Der Hund schläft im Garten, und die Katze ist auf dem Dach.", "de"),
        ("Le chien dort dans le jardin et le chat est sur le toit.", "fr"),
        ("狗在花园里睡觉。猫在屋顶上。", "zh"),
        ("犬は庭で寝ています。", "ja"),
        ("الكلب ينام في الحديقة والقط على السطح.", "ar"),
        ("הכלב ישן בגינה והחתול על הגג.", "he"),
        ("Собака спит в саду.", "ru"),
        ("12345 67890", "en"),
    ],
)
def test_the_language_comes_from_the_script_and_the_stop_words(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_a_given_language_wins_over_detection() -> None:
    assert documents_language(["Der Hund und die Katze."], "nl") == "nl"
    assert documents_language(["Der Hund und die Katze.", "Das ist gut."]) == "de"


def test_chinese_gets_character_pairs_and_words_are_stemmed_without_stop_words() -> None:
    assert lexical_tokens("周文华在哪个城市工作？", "zh") == [
        "周文",
        "文华",
        "华在",
        "在哪",
        "哪个",
        "个城",
        "城市",
        "市工",
        "工作",
    ]
    # question words ("which", "does") would match every question in a chat history
    assert lexical_tokens("Which city does Ann work in?") == ["citi", "ann", "work"]
    assert lexical_tokens("Which migrations add indexes?") == lexical_tokens("the migration adding an index")
    assert lexical_tokens("Anna und Jonas wohnen in Köln.", "de") == ["anna", "jonas", "wohn", "koln"]
    assert lexical_tokens("Лиза читала книги", "ru") == ["лиз", "чита", "книг"]
    assert lexical_tokens("the pages of 0268_add_refund_index.sql") == [
        "page",
        "0268_add_refund_index",
        "0268",
        "add",
        "refund",
        "index",
        "sql",
    ]
    assert lexical_tokens("Ann works", "ja") == ["ann", "works"]  # no Snowball stemmer: words as written


def test_a_listing_line_matches_a_question_in_other_words_forms() -> None:
    listing = [
        " 22642  db/migrations/0268_add_refund_index.sql",
        " 7937  db/migrations/0634_tasks_reports.sql",
        "What does config/search.json contain?",
    ]
    scores = bm25_scores("What number does the migration that adds the refund index have?", listing)
    assert int(scores.argmax()) == 0 and scores[2] == 0


@pytest.mark.parametrize(
    ("question", "sentences", "gold", "language"),
    [
        (
            "周文华在哪个城市工作？",
            ["李明傍晚在市场看书。", "周文华在星光科技工作。", "张伟在公园画画。"],
            1,
            "zh",
        ),
        ("في أي مدينة يعمل باسل عودة؟", ["ذهب سامي إلى السوق.", "يعمل باسل عودة في شركة النور."], 1, "ar"),
        ("Wo arbeitet Jonas?", ["Die Katze schläft.", "Jonas arbeitet bei der Nordlicht AG."], 1, "de"),
    ],
)
def test_bm25_ranks_the_sentence_that_shares_the_question_terms_first(
    question, sentences, gold, language
) -> None:
    scores = bm25_scores(question, sentences, language)
    assert int(scores.argmax()) == gold and float(scores[gold]) > 0


def test_bm25_without_a_shared_term_scores_zero() -> None:
    assert bm25_scores("银色月亮", ["The dog sleeps.", "Der Hund schläft."]).tolist() == [0.0, 0.0]


def test_the_second_round_query_keeps_only_the_strongly_connected_sentences() -> None:
    # Every "... works at ..." sentence shares the pair 工作 with the question; only the first names
    # the person. With all four in the query BM25 cannot tell which company's seat answers.
    sentences = [
        "周文华在星光科技工作。",
        "吴晓东在海天集团工作。",
        "孙建国在金山实业工作。",
        "朱志强在华锐公司工作。",
        "海天集团位于武汉。",
        "金山实业位于成都。",
        "星光科技位于大连。",
        "华锐公司位于南京。",
    ]
    question = "周文华在哪个城市工作？"
    scores = recursive_bm25_scores(question, sentences, [0, 1, 2, 3], "zh")
    assert int(scores[4:].argmax()) + 4 == 6


def test_sentences_follow_the_language_rules() -> None:
    text = "Er kam am 3. Mai nach Wien. Sie blieb in Graz."
    assert len(split_sentences(text, language="de")) == 2
    chinese = "我住在北京。他住在上海！你呢？"
    assert [chinese[s:e] for s, e in split_sentences(chinese, language="zh")] == [
        "我住在北京。",
        "他住在上海！",
        "你呢？",
    ]
    arabic = "أنا أعيش في القاهرة. هو يعيش في دبي؟ نعم."
    assert len(document_sentences([arabic])) == 3  # detected as Arabic


def test_the_config_takes_a_language_code_and_refuses_anything_else() -> None:
    assert ReplayConfig(language="zh").language == "zh"
    assert ReplayConfig(language="pt-BR").language == "pt-BR"
    for bad in ("", "Chinese", "z", "de de"):
        with pytest.raises(ReContextError, match="language"):
            ReplayConfig(language=bad)


def _count(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 3)


@pytest.mark.parametrize("task", MULTILINGUAL_TASKS)
def test_multilingual_tasks_plant_whole_gold_sentences_in_their_language(task: str) -> None:
    case = generate_case(task, length=600, depth=0.5, count_tokens=_count, layout="docs")
    documents = case.documents
    language = task.rsplit("_", 1)[1]
    assert documents_language(documents) == language
    sentences = {(s.doc_index, s.start, s.end) for s in document_sentences(documents)}
    for gold in case.gold:
        assert (gold.doc_index, gold.char_start, gold.char_end) in sentences
    assert len(case.gold) == TASKS[task].hops
    assert (
        case.answers[0]
        in documents[case.gold[-1].doc_index][case.gold[-1].char_start : case.gold[-1].char_end]
    )
    again = generate_case(task, length=600, depth=0.5, count_tokens=_count, layout="docs")
    assert again.to_dict() == case.to_dict()
