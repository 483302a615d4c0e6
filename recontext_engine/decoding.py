"""Token sampling and incremental detokenization with stop strings."""

from __future__ import annotations

from typing import Any

import torch

from .config import GenerationConfig

# Temperatures below this are greedy (as in vLLM): dividing by them overflows float32 logits.
GREEDY_BELOW = 1e-5


def next_token(logits: torch.Tensor, config: GenerationConfig, generator: torch.Generator | None) -> int:
    """Greedy at temperature 0, else temperature + nucleus (top-p) sampling. ``logits``: (vocab,)."""
    if config.temperature < GREEDY_BELOW:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / config.temperature, dim=-1)
    if config.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < config.top_p
        keep[0] = True  # the likeliest token always stays, however small top_p is
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


class TextAssembler:
    """Turns generated token ids into text pieces; holds back text that may still become a stop string.

    ``add`` returns the new printable text; ``stopped`` turns True once a stop string appears.
    """

    def __init__(self, tokenizer: Any, stop: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self.ids: list[int] = []
        self.emitted = 0
        self.text = ""
        self.stopped = False

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # an incomplete multi-byte character: wait for the next token
            return ""
        self.text = text
        for stop in self.stop:
            at = text.find(stop)
            if at >= 0:
                self.stopped = True
                self.text = text[:at]
                return self._emit(len(self.text))
        hold = max((len(s) - 1 for s in self.stop), default=0)
        return self._emit(max(self.emitted, len(text) - hold))

    def finish(self) -> str:
        """The text held back at the end."""
        return self._emit(len(self.text))

    def _emit(self, upto: int) -> str:
        piece = self.text[self.emitted : upto]
        self.emitted = max(self.emitted, upto)
        return piece
