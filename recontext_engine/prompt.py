"""The prompt layout ``x+ = [C; E; q]`` in token space, with provenance for every context token.

The prompt is tokenized as two parts: the *prefix* (chat-template start and the context C)
and the *suffix* (evidence E, question q and the template end). Vanilla (no evidence) and
every replay round share the same prefix token ids, so the prefix KV cache is computed once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .results import Evidence
from .spans import Sentence, replay_text
from .structured import tools_instructions

if TYPE_CHECKING:
    from .config import ReplayConfig

NULL_QUESTION = "N/A"


@dataclass
class Prefix:
    """Template start plus the context: token ids and, per token, the sentence it lies in (-1: none)."""

    ids: list[int]
    token_sentence: torch.Tensor  # (len(ids),) int64
    documents: list[str]
    sentences: list[Sentence]


@dataclass
class Suffix:
    """Evidence, question and template end; ``token_sentence`` maps replayed tokens back to sentences."""

    ids: list[int]
    token_sentence: torch.Tensor  # (len(ids),) int64
    evidence_tokens: int


def context_block(documents: Sequence[str]) -> tuple[str, list[int]]:
    """The context text and the offset of each document inside it."""
    if len(documents) == 1:
        return documents[0], [0]
    parts, offsets, cursor = [], [], 0
    for i, doc in enumerate(documents):
        header = f"[Document {i + 1}]\n"
        offsets.append(cursor + len(header))
        parts.append(header + doc)
        cursor += len(header) + len(doc) + 2
    return "\n\n".join(parts), offsets


def evidence_label(index: int, numbered: bool) -> str:
    """What precedes replayed sentence ``index`` (0-based): ``[1] `` when numbered for citing."""
    return f"[{index + 1}] " if numbered else ""


def render_evidence_block(texts: Sequence[str], config: ReplayConfig, numbered: bool = False) -> str:
    """The evidence block as the prompt holds it: ``config.evidence_template`` with its first
    ``{evidence}`` replaced by the sentences (other braces are left alone); ``numbered`` puts
    ``[1]``, ``[2]``, ... before them (``cite_evidence``)."""
    head, _, tail = config.evidence_template.partition("{evidence}")
    # A sentence wrapped over several lines is replayed on one line (its offsets stay exact).
    lines = (evidence_label(i, numbered) + replay_text(t) for i, t in enumerate(texts))
    return head + config.evidence_separator.join(lines) + tail


def system_text(config: ReplayConfig) -> str:
    """The system message: ``system_prompt``, then the tools the model is offered (if any)."""
    parts = [config.system_prompt or ""]
    if config.generation.offers_tools:
        parts.append(tools_instructions(config.generation.tools))
    return "\n\n".join(p.strip() for p in parts if p.strip())


def _map_tokens(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> torch.Tensor:
    """For each token's (start, end) char range, the index of the span it overlaps (-1: none).

    A token that straddles spans belongs to the last span starting at or before its last character.
    """
    result = torch.full((len(offsets),), -1, dtype=torch.long)
    if not spans or not offsets:
        return result
    starts = torch.tensor([s for s, _ in spans])
    ends = torch.tensor([e for _, e in spans])
    tok = torch.tensor(offsets, dtype=torch.long).reshape(-1, 2)
    index = torch.searchsorted(starts, tok[:, 1] - 1, right=True) - 1
    safe = index.clamp(min=0)
    inside = (index >= 0) & (tok[:, 1] > tok[:, 0]) & (tok[:, 0] < ends[safe]) & (tok[:, 1] > starts[safe])
    result[inside] = index[inside]
    return result


def with_tools(messages: Sequence[Mapping[str, Any]], config: ReplayConfig) -> list[dict[str, Any]]:
    """Chat ``messages`` with the offered tools stated at the end of the (first) system message."""
    result = [dict(m) for m in messages]
    if not config.generation.offers_tools:
        return result
    tools = tools_instructions(config.generation.tools)
    if result and result[0].get("role") == "system":
        result[0]["content"] = f"{result[0].get('content', '')}\n\n{tools}".strip()
    else:
        result.insert(0, {"role": "system", "content": tools})
    return result


class PromptBuilder:
    """Renders ``[C; E; q]`` through the tokenizer's chat template (or a plain layout without one)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    def _render(self, user_content: str, config: ReplayConfig) -> str:
        if not self.has_chat_template:
            return user_content + "\nAnswer:"
        messages = []
        system = system_text(config)
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": user_content})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _split_rendered(self, context_text: str, tail: str, config: ReplayConfig) -> tuple[str, str]:
        user_content = "Context:\n" + context_text + tail
        rendered = self._render(user_content, config)
        at = rendered.find(user_content)
        if at < 0:
            raise ValueError("the chat template does not keep the user message verbatim")
        cut = at + len("Context:\n") + len(context_text)
        return rendered[:cut], rendered[cut:]

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def prefix(self, documents: list[str], sentences: list[Sentence], config: ReplayConfig) -> Prefix:
        text, doc_offsets = context_block(documents)
        prefix_text, _ = self._split_rendered(text, "\n\n", config)
        base = len(prefix_text) - len(text)
        ids, offsets = self._encode(prefix_text)
        spans = [
            (base + doc_offsets[s.doc_index] + s.start, base + doc_offsets[s.doc_index] + s.end)
            for s in sentences
        ]
        return Prefix(ids, _map_tokens(offsets, spans), list(documents), list(sentences))

    def suffix(
        self,
        prefix: Prefix,
        question: str,
        evidence: Sequence[Evidence],
        config: ReplayConfig,
        sentence_of: dict[tuple[int, int, int], int] | None = None,
        numbered: bool = False,
    ) -> Suffix:
        """Evidence block (if any) and the question; ``sentence_of`` maps evidence back to sentence ids;
        ``numbered`` labels the sentences for citing."""
        context_text, _ = context_block(prefix.documents)
        tail = "\n\n"
        evidence_spans: list[tuple[int, int]] = []
        if evidence:
            head = config.evidence_template.partition("{evidence}")[0]
            cursor = len(tail) + len(head)
            for i, item in enumerate(evidence):
                if i:
                    cursor += len(config.evidence_separator)
                cursor += len(evidence_label(i, numbered))
                replayed = len(replay_text(item.text))  # as render_evidence_block writes it
                evidence_spans.append((cursor, cursor + replayed))
                cursor += replayed
            block = render_evidence_block([e.text for e in evidence], config, numbered)
            tail += block + "\n\n"
        tail += config.question_template.format(question=question)
        _, suffix_text = self._split_rendered(context_text, tail, config)
        ids, offsets = self._encode(suffix_text)
        local = _map_tokens(offsets, evidence_spans)
        token_sentence = torch.full_like(local, -1)
        if sentence_of is not None:
            for j, item in enumerate(evidence):
                sid = sentence_of.get((item.doc_index, item.char_start, item.char_end), -1)
                token_sentence[local == j] = sid
        return Suffix(ids, token_sentence, int((local >= 0).sum()))
