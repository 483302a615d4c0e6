"""The selection signal interface, the round a signal scores, and the name -> class registry.

A signal scores every context sentence for one round of ReContext's loop; the engine then picks
the round's best sentences that are not in the pool yet. A new signal is one module with a small
frozen dataclass that subclasses :class:`Signal`, registered with :func:`register_signal`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..errors import ReContextError
from ..registry import Registry
from ..results import Evidence

if TYPE_CHECKING:
    from ..reads import RoundReader
    from ..request import Request
    from ..semantic import EmbeddingIndex


@dataclass
class SelectionRound:
    """What a signal may look at in one round: the request, the evidence pooled so far, the model."""

    index: int  # 1 for the first round
    request: Request
    evidence: list[Evidence]  # the pool, in the order the round's read passes see it
    reader: RoundReader  # attention read passes and the model's input embeddings
    top_k: int  # sentences the round picks at most

    @property
    def question(self) -> str:
        return self.request.question

    @property
    def sentence_texts(self) -> list[str]:
        return self.request.sentence_texts

    @property
    def language(self) -> str:
        return self.request.language

    @property
    def num_sentences(self) -> int:
        return self.request.num_sentences

    @cached_property
    def pooled(self) -> list[int]:
        """Sentence ids of the pooled evidence."""
        return self.request.pooled(self.evidence)

    @cached_property
    def query(self) -> str:
        """The round's text query: the question plus the pooled sentences connected to it (see
        :func:`~recontext_engine.lexical.connected_sentences`), so a later round finds the next hop."""
        return self.request.query(self.evidence)

    def embedding_index(self) -> EmbeddingIndex | None:
        """The context side of the embedding similarity (built once per request); None where the
        backend gives no input embeddings."""
        return self.request.embedding_index(self.reader.input_embeddings)

    def tokenize(self, text: str) -> list[int]:
        return self.reader.tokenize(text)


class Signal(ABC):
    """One selection signal: a score for every context sentence in a round (higher: more relevant).

    Subclasses are frozen dataclasses whose fields are the signal's settings (validated in
    ``__post_init__``). ``name`` is set by :func:`register_signal`.
    """

    name: ClassVar[str] = ""
    zero_is_no_match: ClassVar[bool] = False
    """Whether a score of 0 means "nothing in common" (BM25): such sentences earn no credit in a fusion."""

    @abstractmethod
    def score(self, round: SelectionRound) -> torch.Tensor | None:
        """(round.num_sentences,) float32 scores of the context sentences for this round (-inf: never
        pick it); None where the signal cannot score here (no input embeddings, say)."""

    def signals(self) -> tuple[Signal, ...]:
        """This signal and those it is made of (a composite's parts)."""
        return (self,)

    def describe(self) -> str:
        """``name(setting=value, ...)`` with the settings that differ from their defaults."""
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != f.default
        ]
        return f"{self.name}({', '.join(changed)})"

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., setting: value, ...}``; :func:`signal_from_dict` reads it back."""
        data: dict[str, Any] = {"name": self.name}
        for f in fields(self):  # type: ignore[arg-type]  # every registered signal is a dataclass
            value = getattr(self, f.name)
            data[f.name] = value.to_dict() if isinstance(value, Signal) else value
        return data


SIGNALS: Registry[Signal] = Registry("signal", Signal)
"""Registered signals by name (see :func:`register_signal`)."""

register_signal = SIGNALS.register
"""Class decorator: register a :class:`Signal` under a name (a name is taken only once)."""

get_signal = SIGNALS.lookup
"""The signal class registered under a name; an unknown name is one clear error."""


def signal_from_dict(data: dict[str, Any] | str) -> Signal:
    """A signal from :meth:`Signal.to_dict`'s output, or from its bare registered name (defaults)."""
    if isinstance(data, str):
        return get_signal(data)()
    settings = dict(data)
    cls = get_signal(str(settings.pop("name", "")))
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ReContextError(f"unknown setting(s) of signal {cls.name!r}: {', '.join(unknown)}")
    return cls(**settings)


def pick_sentences(
    scores: torch.Tensor,
    present: torch.Tensor,
    top_k: int,
    exclude: Sequence[int] = (),
    first_copy: torch.Tensor | None = None,
) -> list[tuple[int, float]]:
    """The ``top_k`` best-scored sentences, best first, as ``(sentence_id, score)``.

    Only sentences ``present`` in the context's candidates with a score above -inf are picked,
    none of ``exclude`` (the pool: a later round brings new evidence), and of sentences with the
    same text (``first_copy``: the id of each one's first copy; a log's repeated lines) only the
    best-scored copy, and none when a copy is excluded, since a repeated line adds nothing.
    """
    scores = scores.float().clone()
    allowed = present.clone()
    allowed[list(exclude)] = False
    scores[~allowed] = float("-inf")
    order = torch.argsort(scores, descending=True, stable=True)[: int(allowed.sum())].tolist()
    copy_of = first_copy.tolist() if first_copy is not None else list(range(len(scores)))
    taken = {copy_of[s] for s in exclude}
    picks: list[tuple[int, float]] = []
    for s in order:
        if len(picks) == top_k or scores[s] == float("-inf"):
            break
        if copy_of[s] not in taken:
            taken.add(copy_of[s])
            picks.append((s, float(scores[s])))
    return picks


__all__ = [
    "SIGNALS",
    "SelectionRound",
    "Signal",
    "get_signal",
    "pick_sentences",
    "register_signal",
    "signal_from_dict",
]
