"""Which part of a chat is context and which is the question: one rule set for every front end.

The LangChain adapter, the LlamaIndex adapter and the OpenAI-compatible server convert their
messages to ``{"role", "content"}`` dicts (roles ``system``, ``user``, ``assistant``, ``tool``)
and call :func:`split_messages`. It imports no framework. The rules, in order:

1. ``documents=`` given explicitly (``"documents"``): they are the context; the whole last user
   message is the question; earlier turns are not used.
2. The last user message is the question. Its text is split, first rule that matches:

   - a known template (``patterns``; LlamaIndex's text-QA, tree-summarize and refine prompts);
   - ``"delimited"``: context between the first and the last line of dashes, the question after
     the last ``Question:``/``Query:`` line below them (LlamaIndex ``CitationQueryEngine``);
   - ``"question_first"``: a ``Question:`` line followed by a ``Context:`` line (LangChain hub
     ``rlm/rag-prompt``): the text between them is the question, the text after ``Context:``
     (less a trailing ``Answer:``) the context, the text before ``Question:`` an instruction
     that joins the system prompt;
   - ``"question_marker"``: at the last line starting with the question marker: the text after
     it is the question, the text before it (less a leading ``Context:`` label) the context.
3. ``"system_context"``: a system message that carries retrieved context (the LangChain RAG
   tutorial, ``create_stuff_documents_chain``, v1 agents' dynamic prompts, LlamaIndex
   ``ContextChatEngine`` and ``CondensePlusContextChatEngine``) gives its context part: the text
   between two dashed lines, else the text after a line that ends with ``:`` and names the
   context (up to an ``Instruction:`` line), else the paragraphs after a first paragraph that
   speaks of "the following/below context". The rest stays the system prompt.
4. ``"history"`` (``history_as_context``): every other user, assistant and tool message with
   text is one context document, in order.
5. ``"none"``: no context: plain chat, no replay.

Documents are ordered by the message they came from; ``MessageSplit.sources`` gives that
message's index (-1 for explicit documents). Control characters the engine refuses (NUL, ESC, C1,
...) become spaces first, on every side, by :func:`clean_text`; form feeds from PDF loaders and the
other whitespace controls are kept (the engine reads them as page and line breaks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

from .spans import clean_control


@lru_cache(maxsize=128)
def linear_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2, whose matching time is linear in the text.

    Every pattern here reads user text, and Python's backtracking ``re`` can take minutes on
    crafted input (refine markers repeated a thousand times took 122 s). RE2 syntax is Python's
    less backreferences and lookarounds; flags are inline (``(?s)``, ``(?m)``, ``(?i)``).
    """
    return re2.compile(pattern)


_DASH_LINE = linear_regex(r"(?m)^[ \t]*-{3,}[ \t]*$")
_CONTEXT_LABEL = linear_regex(r"(?i)^\s*Context:[ \t]*\n?")
_ANSWER_TAIL = linear_regex(r"\n[ \t]*(?:Answer|Response):[ \t]*$")
_CONTEXT_NOUN = r"(?:context|documents?|sources?|information|excerpts?|passages?|snippets?|notes)"
_INTRO_LINE = linear_regex(rf"(?im)^[^\n]*\b{_CONTEXT_NOUN}\b[^\n]*:[ \t]*$")
_LABEL_LINE = linear_regex(r"(?im)^[ \t]*Context:[ \t]*")
_INSTRUCTION_LINE = linear_regex(r"(?m)^[ \t]*Instructions?:")
_LEAD_PARAGRAPH = linear_regex(
    rf"(?i)\b(?:following|below)\b[^\n]*\b{_CONTEXT_NOUN}\b|\b{_CONTEXT_NOUN}\b[^\n]*\bbelow\b"
)
DEFAULT_QUESTION_MARKER = "Question:"
HISTORY_ROLES = frozenset({"user", "assistant", "tool"})


@dataclass(frozen=True)
class MessageSplit:
    """Chat messages mapped onto ReContext's ``[C; q]``; no ``documents`` means plain chat."""

    documents: list[str]
    question: str
    system: str | None = None
    rule: str = "none"
    sources: tuple[int, ...] = ()

    @property
    def replays(self) -> bool:
        """Whether the engine replays (there is context and a question)."""
        return bool(self.documents and self.question)


def _compiled(regex: str) -> Any:
    """A template regex, ``.`` matching newlines."""
    return linear_regex("(?s)" + regex)


@dataclass(frozen=True)
class SplitPattern:
    """One known prompt template: ``regex`` (RE2 syntax, matched in linear time with ``.`` matching
    newlines) has ``context`` and ``question`` groups; other named groups may appear in
    ``question_format`` (e.g. refine's existing answer)."""

    name: str
    regex: str
    question_format: str = "{question}"

    def __post_init__(self) -> None:
        try:
            _compiled(self.regex)
        except re2.error as exc:
            raise ValueError(
                f"split pattern {self.name!r} is not an RE2 regex ({exc}); RE2 is Python's syntax "
                "less backreferences and lookarounds"
            ) from None

    @classmethod
    def from_markers(cls, name: str, context_marker: str, question_marker: str) -> SplitPattern:
        """Context from the first ``context_marker`` to the last ``question_marker`` (both regexes)."""
        return cls(name, rf"^.*?{context_marker}(?P<context>.*){question_marker}(?P<question>.*)$")


@dataclass(frozen=True)
class PromptSplit:
    """What :func:`split_prompt` found in one text: context, question and the rule's name."""

    context: str
    question: str
    pattern: str
    instructions: str = ""


_DASHES = r"[ \t]*-{3,}[ \t]*\n"
_ANSWER = r"\s*\n(?:Answer|Response):\s*$"
_REFINE_TAIL = (
    r"Query:[ \t]*(?P<question>.*?)\nOriginal Answer:[ \t]*(?P<existing_answer>.*?)\nNew Answer:\s*$"
)
_REFINE_QUESTION = "{question}\nAn earlier answer, to improve only if the context helps: {existing_answer}"
DEFAULT_SPLIT_PATTERNS: tuple[SplitPattern, ...] = (
    # LlamaIndex text_qa / tree_summarize (default_prompts and chat_prompts, plain and rich forms)
    SplitPattern(
        "llama_index_text_qa",
        rf"^\s*Context information(?: from multiple sources)? is below\.\s*\n{_DASHES}(?P<context>.*)"
        rf"\n{_DASHES}(?:[^\n]*\n)??\s*(?:Query|Question):[ \t]*(?P<question>.*?){_ANSWER}",
    ),
    # LlamaIndex refine (default_prompts): the question comes before the context
    SplitPattern(
        "llama_index_refine",
        r"^\s*The original query is as follows:[ \t]*(?P<question>.*?)\n"
        r"We have provided an existing answer:[ \t]*(?P<existing_answer>.*?)\n"
        rf"We have the opportunity to refine[^\n]*\n{_DASHES}(?P<context>.*)\n{_DASHES}.*$",
        _REFINE_QUESTION,
    ),
    # LlamaIndex refine (chat_prompts): rich form with dashed lines first, then the plain form
    SplitPattern(
        "llama_index_chat_refine",
        rf"^.*?New Context:\s*\n{_DASHES}(?P<context>.*)\n{_DASHES}\s*{_REFINE_TAIL}",
        _REFINE_QUESTION,
    ),
    SplitPattern(
        "llama_index_chat_refine",
        rf"^.*?New Context:[ \t]*(?P<context>.*)\n{_REFINE_TAIL}",
        _REFINE_QUESTION,
    ),
)


def clean_text(text: str) -> str:
    """Control characters the engine refuses (NUL, ESC, DEL, C1, ...) -> spaces, same length.

    One rule with :func:`recontext_engine.spans.check_text` (``spans.REFUSED_CONTROL``): form
    feeds from PDF loaders, vertical tabs, NEL and U+2028/U+2029 are whitespace the engine accepts
    (page and line breaks for its segmentation), so they are kept as they are."""
    return clean_control(text)


def content_text(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a list of content blocks
    (``{"type": "text", "text": ...}``, as OpenAI and LangChain write them) joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (block.get("type") == "text" and isinstance(block.get("text"), str))
    )


def _markers(question_marker: str | Sequence[str] | None) -> tuple[str, ...]:
    if not question_marker:
        return ()
    return (question_marker,) if isinstance(question_marker, str) else tuple(question_marker)


def _marker_lines(text: str, markers: Sequence[str]) -> list[Any]:
    alternatives = "|".join(re2.escape(m) for m in markers)
    return list(linear_regex(rf"(?m)^[ \t]*(?:{alternatives})").finditer(text))


def _strip_answer(text: str) -> str:
    return _ANSWER_TAIL.sub("", text.rstrip()).strip()


def _by_pattern(text: str, patterns: Sequence[SplitPattern]) -> tuple[bool, PromptSplit | None]:
    """Whether a known template matched, and its split (None when its context or question is empty)."""
    for pattern in patterns:
        match = _compiled(pattern.regex).match(text)
        if match is None:
            continue
        groups = {k: (v or "").strip() for k, v in match.groupdict().items()}
        if not (groups.get("context") and groups.get("question")):
            return True, None
        question = pattern.question_format.format(**groups).strip()
        return True, PromptSplit(groups["context"], question, pattern.name)
    return False, None


def _delimited(text: str, markers: Sequence[str]) -> PromptSplit | None:
    dashes = list(_DASH_LINE.finditer(text))
    if len(dashes) < 2:
        return None
    first, last = dashes[0], dashes[-1]
    tail = text[last.end() :]
    found = _marker_lines(tail, [*markers, "Query:"])
    if not found:
        return None
    question = _strip_answer(tail[found[-1].end() :])
    context = text[first.end() : last.start()].strip()
    if not (question and context):
        return None
    return PromptSplit(context, question, "delimited", text[: first.start()].strip())


def _question_first(text: str, markers: Sequence[str]) -> PromptSplit | None:
    if _CONTEXT_LABEL.match(text):
        return None  # it starts with its context
    found = _marker_lines(text, markers)
    # The first marker with a Context: line after it; a later marker cannot have one if it has not.
    label = _LABEL_LINE.search(text, found[0].end()) if found else None
    if label is None:
        return None
    marker = found[0]
    question = text[marker.end() : label.start()].strip()
    context = _strip_answer(text[label.end() :])
    if not (question and context):
        return None
    return PromptSplit(context, question, "question_first", text[: marker.start()].strip())


def _question_marker(text: str, markers: Sequence[str]) -> PromptSplit | None:
    found = _marker_lines(text, markers)
    if not found:
        return None
    question = _strip_answer(text[found[-1].end() :])
    before = _CONTEXT_LABEL.sub("", text[: found[-1].start()].strip(), count=1).strip()
    if not (question and before):
        return None
    return PromptSplit(before, question, "question_marker")


def split_prompt(
    text: str,
    patterns: Sequence[SplitPattern] = DEFAULT_SPLIT_PATTERNS,
    *,
    question_marker: str | Sequence[str] | None = (DEFAULT_QUESTION_MARKER, "Query:"),
) -> PromptSplit | None:
    """Context and question of one prompt text (rule 2 of the module docstring); None if none.

    An empty context or question (e.g. a text-QA prompt with nothing retrieved) is no split.
    """
    text = clean_text(text)
    matched, split = _by_pattern(text, patterns)
    if matched:
        return split
    markers = _markers(question_marker)
    if not markers:
        return None
    for rule in (_delimited, _question_first, _question_marker):
        split = rule(text, markers)
        if split is not None:
            return split
    return None


def split_system(text: str) -> tuple[str, str]:
    """``(instructions, context)`` of a system message; context ``""`` when it carries none (rule 3)."""
    text = clean_text(text)
    dashes = list(_DASH_LINE.finditer(text))
    if len(dashes) >= 2 and (context := text[dashes[0].end() : dashes[-1].start()].strip()):
        return _join(text[: dashes[0].start()], text[dashes[-1].end() :]), context
    intro = _INTRO_LINE.search(text) or _LABEL_LINE.search(text)
    if intro is not None:
        rest = text[intro.end() :]
        stop = _INSTRUCTION_LINE.search(rest)
        context = (rest[: stop.start()] if stop else rest).strip()
        if context:
            kept_intro = "" if _LABEL_LINE.match(intro.group()) else intro.group()
            return _join(text[: intro.start()], kept_intro, rest[stop.start() :] if stop else ""), context
    lead, sep, rest = text.strip().partition("\n\n")
    if sep and rest.strip() and _LEAD_PARAGRAPH.search(lead):
        return lead.strip(), rest.strip()
    return text.strip(), ""


def _join(*parts: str) -> str:
    return "\n\n".join(p.strip() for p in parts if p.strip())


def split_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    documents: Sequence[str] | None = None,
    question_marker: str | Sequence[str] | None = DEFAULT_QUESTION_MARKER,
    history_as_context: bool = True,
    patterns: Sequence[SplitPattern] = DEFAULT_SPLIT_PATTERNS,
    system_context: bool = True,
) -> MessageSplit:
    """Map ``{"role", "content"}`` messages onto ``[C; q]`` by the rules of the module docstring.

    ``question_marker`` (one marker or several; None turns the text rules 2 off, except known
    ``patterns``), ``history_as_context`` and ``system_context`` tune the rules.
    """
    texts = [clean_text(content_text(m.get("content"))) for m in messages]
    roles = [str(m.get("role", "user")) for m in messages]
    last = next((i for i in range(len(messages) - 1, -1, -1) if roles[i] == "user"), None)
    system_parts = [texts[i].strip() for i in range(len(messages)) if roles[i] == "system"]
    if last is None:
        return MessageSplit([], "", _join(*system_parts) or None)
    question = texts[last].strip()
    if documents is not None:
        docs = [clean_text(d) for d in documents]
        return MessageSplit(docs, question, _join(*system_parts) or None, "documents", (-1,) * len(docs))
    found: list[tuple[int, str]] = []
    rules: list[str] = []
    split = split_prompt(question, patterns, question_marker=question_marker)
    instructions = ""
    if split is not None:
        question, instructions = split.question, split.instructions
        rules.append(split.pattern)
    system_parts = []
    for i in range(len(messages)):
        if roles[i] != "system":
            continue
        kept, context = split_system(texts[i]) if system_context else (texts[i].strip(), "")
        system_parts.append(kept)
        if context:
            found.append((i, context))
            rules.append("system_context")
    if history_as_context:
        history = [(i, t.strip()) for i, t in enumerate(texts) if i != last and roles[i] in HISTORY_ROLES]
        history = [(i, t) for i, t in history if t]
        found += history
        rules += ["history"] if history else []
    if split is not None:
        found.append((last, split.context))
    found.sort(key=lambda pair: pair[0])
    system = _join(*system_parts, instructions) or None
    return MessageSplit(
        [t for _, t in found], question, system, rules[0] if rules else "none", tuple(i for i, _ in found)
    )


def chat_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Messages for plain chat: cleaned text, empty ones dropped, system messages merged at the front."""
    texts = [clean_text(content_text(m.get("content"))).strip() for m in messages]
    roles = [str(m.get("role", "user")) for m in messages]
    system = _join(*(t for t, r in zip(texts, roles) if r == "system"))
    result = [{"role": "system", "content": system}] if system else []
    result += [{"role": r, "content": t} for t, r in zip(texts, roles) if r != "system" and t]
    return result
