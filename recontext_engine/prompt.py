"""The prompt layout ``x+ = [C; E; q]`` in token space, with provenance for every context token.

The prompt is tokenized as two parts: the *prefix* (chat-template start and the context C)
and the *suffix* (evidence E, question q and the template end). Vanilla (no evidence) and
every replay round share the same prefix token ids, so the prefix KV cache is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .results import Evidence
from .spans import Sentence, replay_text

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


def render_evidence_block(texts: Sequence[str], config: ReplayConfig) -> str:
    """The evidence block as the prompt holds it: ``config.evidence_template`` with its first
    ``{evidence}`` replaced by the sentences (other braces are left alone)."""
    head, _, tail = config.evidence_template.partition("{evidence}")
    # A sentence wrapped over several lines is replayed on one line (its offsets stay exact).
    return head + config.evidence_separator.join(replay_text(t) for t in texts) + tail


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


class PromptBuilder:
    """Renders ``[C; E; q]`` through the tokenizer's chat template (or a plain layout without one)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    def _render(self, user_content: str, config: ReplayConfig) -> str:
        if not self.has_chat_template:
            return user_content + "\nAnswer:"
        messages = []
        if config.system_prompt:
            messages.append({"role": "system", "content": config.system_prompt})
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
    ) -> Suffix:
        """Evidence block (if any) and the question; ``sentence_of`` maps evidence back to sentence ids."""
        context_text, _ = context_block(prefix.documents)
        tail = "\n\n"
        evidence_spans: list[tuple[int, int]] = []
        if evidence:
            head = config.evidence_template.partition("{evidence}")[0]
            cursor = len(tail) + len(head)
            for i, item in enumerate(evidence):
                if i:
                    cursor += len(config.evidence_separator)
                replayed = len(replay_text(item.text))  # as render_evidence_block writes it
                evidence_spans.append((cursor, cursor + replayed))
                cursor += replayed
            block = render_evidence_block([e.text for e in evidence], config)
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
