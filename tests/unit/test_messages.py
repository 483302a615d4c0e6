"""The shared context/question rules (recontext_engine.messages), against each prompt shape."""

from __future__ import annotations

import pytest

from recontext_engine.messages import (
    DEFAULT_SPLIT_PATTERNS,
    MessageSplit,
    SplitPattern,
    chat_messages,
    clean_text,
    content_text,
    split_messages,
    split_prompt,
    split_system,
)

CONTEXT = "Ada lives in Lisbon. Bruno lives in Oslo.\n\nChloe lives in Nairobi."
QUESTION = "Where does Bruno live?"
# The LangChain hub prompt rlm/rag-prompt, verbatim (the trailing spaces are its own).
RAG_PROMPT = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
    "answer the question. If you don't know the answer, just say that you don't know. Use three sentences "
    "maximum and keep the answer concise.\nQuestion: {question} \nContext: {context} \nAnswer:"
)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def test_clean_text_keeps_length_and_layout() -> None:
    # One rule with spans.check_text: the form feed (a page break) is whitespace and stays.
    text = "page one\x0cpage two\ttab\nline\r\n\x00end\x7f"
    cleaned = clean_text(text)
    assert len(cleaned) == len(text) and cleaned == "page one\x0cpage two\ttab\nline\r\n end "


def test_content_text_takes_text_blocks() -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, "b"]
    assert content_text(blocks) == "a\nb" and content_text(None) == "" and content_text("x") == "x"


def test_lone_message_is_plain_chat() -> None:
    split = split_messages([user("Hello")])
    assert split == MessageSplit([], "Hello", None, "none", ()) and not split.replays


def test_context_then_question_marker() -> None:
    split = split_messages(
        [system("Be brief."), user(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}\nAnswer:")]
    )
    assert split == MessageSplit([CONTEXT], QUESTION, "Be brief.", "question_marker", (1,))
    assert split.replays


def test_hub_rag_prompt_question_before_context() -> None:
    text = RAG_PROMPT.format(question=QUESTION, context=CONTEXT)
    split = split_messages([user(text)])
    assert (split.documents, split.question, split.rule) == ([CONTEXT], QUESTION, "question_first")
    assert split.system is not None and split.system.startswith("You are an assistant")
    assert "Question:" not in split.system and CONTEXT not in split.system


def test_question_first_ignores_question_lines_inside_a_leading_context() -> None:
    text = f"Context: {CONTEXT}\nQuestion: an old one\nContext: more\n\nQuestion: {QUESTION}"
    split = split_prompt(text)
    assert split is not None and split.pattern == "question_marker" and split.question == QUESTION


def test_pdf_form_feeds_are_kept_as_page_breaks() -> None:
    # One rule with spans.check_text: a form feed is whitespace (a page break) the engine accepts;
    # only the refused controls (here NUL) become spaces.
    pdf = "Page 1 text. Bruno lives in Oslo.\x0cPage 2 text.\x00"
    split = split_messages([user(f"Context: {pdf}\nQuestion: {QUESTION}")])
    assert split.documents == [pdf.replace("\x00", " ").strip()]


@pytest.mark.parametrize(
    ("text", "instructions"),
    [
        # LangChain RAG tutorial (v0.3) / create_stuff_documents_chain: instructions, blank line, context
        (
            "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
            "context to answer the question. If you don't know the answer, say that you don't know.\n\n{c}",
            "You are an assistant for question-answering tasks.",
        ),
        # LangChain v1 agent dynamic prompt (docs' RAG agent)
        ("You are a helpful assistant. Use the following context in your response:\n\n{c}", "You are a"),
        # LlamaIndex ContextChatEngine default template (+ its system prompt)
        (
            "Use the context information below to assist the user.\n--------------------\n{c}"
            "\n--------------------\nYou are terse.",
            "Use the context information below",
        ),
        # LlamaIndex CondensePlusContextChatEngine default template
        (
            "\n  The following is a friendly conversation between a user and an AI assistant.\n"
            "  If the assistant does not know the answer to a question, it truthfully says it\n"
            "  does not know."
            "\n\n  Here are the relevant documents for the context:\n\n  {c}\n\n  Instruction: Based on the "
            'above documents, provide a detailed answer for the user question below.\n  Answer "don\'t know"'
            " if not present in the document.\n  ",
            "The following is a friendly conversation",
        ),
        ("Context: {c}", ""),
    ],
)
def test_system_message_context(text: str, instructions: str) -> None:
    split = split_messages([system(text.replace("{c}", CONTEXT)), user(QUESTION)])
    assert (split.documents, split.question, split.rule, split.sources) == (
        [CONTEXT],
        QUESTION,
        "system_context",
        (0,),
    )
    assert (split.system or "").startswith(instructions) and "Bruno" not in (split.system or "")


def test_condense_plus_context_keeps_its_instruction_tail() -> None:
    text = f"Here are the relevant documents for the context:\n\n{CONTEXT}\n\nInstruction: Be exact."
    kept, context = split_system(text)
    assert context == CONTEXT and kept.endswith("Instruction: Be exact.")


@pytest.mark.parametrize(
    "text", ["Be brief.", "You are a helpful assistant.\n\nAlways answer politely.", "Use the notes."]
)
def test_plain_system_prompts_are_not_context(text: str) -> None:
    assert split_system(text) == (text, "")
    assert split_messages([system(text), user("Hi")]).rule == "none"


def test_history_is_context_with_message_indices() -> None:
    messages = [
        system("Be brief."),
        user("Ada lives in Lisbon."),
        {"role": "assistant", "content": "Noted."},
        {"role": "tool", "content": "Bruno lives in Oslo."},
        {"role": "assistant", "content": ""},
        user(f"Context: The museum opens at nine.\nQuestion: {QUESTION}"),
    ]
    split = split_messages(messages)
    assert split.documents == [
        "Ada lives in Lisbon.",
        "Noted.",
        "Bruno lives in Oslo.",
        "The museum opens at nine.",
    ]
    assert split.sources == (1, 2, 3, 5) and split.rule == "question_marker" and split.system == "Be brief."
    history = split_messages(messages[:-1] + [user(QUESTION)])
    assert history.rule == "history" and history.question == QUESTION and history.sources == (1, 2, 3)
    assert split_messages(messages, history_as_context=False).documents == ["The museum opens at nine."]


def test_explicit_documents_win() -> None:
    split = split_messages([user("earlier"), user("Question: where?")], documents=["A\x0c\x1b.", "B."])
    # The form feed (whitespace) stays, the refused ESC becomes a space: one rule with check_text.
    assert split == MessageSplit(["A\x0c .", "B."], "Question: where?", None, "documents", (-1, -1))


def test_question_marker_knobs() -> None:
    text = f"Context:\n{CONTEXT}\n\nQuery: {QUESTION}"
    assert split_messages([user(text)]).rule == "none"  # default marker is "Question:" only
    assert split_messages([user(text)], question_marker=("Question:", "Query:")).documents == [CONTEXT]
    assert split_messages([user(f"Context: x\nQuestion: {QUESTION}")], question_marker=None).rule == "none"
    assert split_messages([user("Context: x\nQuestion:")]).documents == []  # empty question: no split


def test_last_marker_line_wins_and_inline_marker_is_text() -> None:
    text = "Notes: the word Question: inline stays.\nQuestion: first?\nmore notes\n  Question: second?\nsub"
    split = split_prompt(text)
    assert split is not None and split.question == "second?\nsub"
    assert split.context == "Notes: the word Question: inline stays.\nQuestion: first?\nmore notes"


def test_delimited_prompt_citation_shape() -> None:
    text = (
        "Please cite sources. For example:\nSource 1:\nThe sky is red.\nQuery: When is water wet?\n"
        "Answer: never.\nNow it's your turn. Below are several numbered sources of information:"
        f"\n------\nSource 1:\n{CONTEXT}\n------\nQuery: {QUESTION}\nAnswer: "
    )
    split = split_prompt(text)
    assert split is not None and split.pattern == "delimited"
    assert (split.context, split.question) == (f"Source 1:\n{CONTEXT}", QUESTION)


def test_custom_patterns_and_empty_match() -> None:
    custom = SplitPattern.from_markers("mine", r"<docs>", r"</docs>\s*Ask:")
    text = f"<docs>{CONTEXT}</docs>\nAsk: {QUESTION}"
    assert split_prompt(text) is None
    split = split_prompt(text, [custom, *DEFAULT_SPLIT_PATTERNS])
    assert split is not None and (split.context, split.question, split.pattern) == (CONTEXT, QUESTION, "mine")
    assert split_prompt("<docs> </docs>\nAsk: q", [custom]) is None


def test_chat_messages_merges_system_and_drops_empty() -> None:
    messages = [system("a"), user("hi"), system("b\x0c"), {"role": "assistant", "content": ""}]
    assert chat_messages(messages) == [
        {"role": "system", "content": "a\n\nb"},
        {"role": "user", "content": "hi"},
    ]


def test_no_user_message_means_plain_chat() -> None:
    assert split_messages([system("s"), {"role": "assistant", "content": "a"}]) == MessageSplit([], "", "s")


# Repeated template markers made Python's backtracking regexes take minutes (122 s at 1,200 words).
ADVERSARIAL_UNITS = [
    "New Context:\n---\nQuery:\nOriginal Answer:\n",
    "Context information is below.\n---\nQuestion:\n----------\n",
    "The original query is as follows: \nWe have provided an existing answer:\n"
    "We have the opportunity to refine\n",
    "Question:\nContext:\n",
    "context context below: ",
    "-" * 40 + "\n",
]


def _split_all(text: str) -> None:
    split_prompt(text)
    split_system(text)
    split_messages([{"role": "system", "content": text}, user(text)])


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS, ids=range(len(ADVERSARIAL_UNITS)))
def test_100_kb_of_repeated_markers_is_split_at_once(unit: str) -> None:
    import multiprocessing

    # In a forked process: a backtracking regex holds the GIL, so a thread could not be timed out.
    worker = multiprocessing.get_context("fork").Process(
        target=_split_all, args=(unit * (100_000 // len(unit)),)
    )
    worker.start()
    worker.join(timeout=10)  # linear time: ~0.2 s here; the backtracking patterns: hours
    hung = worker.is_alive()
    worker.kill()
    assert not hung and worker.exitcode == 0


def test_a_split_pattern_outside_re2_syntax_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="not an RE2 regex"):
        SplitPattern("backref", r"(?P<context>a)(?P<question>\1)")
