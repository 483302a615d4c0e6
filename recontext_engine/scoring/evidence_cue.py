"""The replayed evidence's own attention: what the pooled sentences point at in the context.

From round 2 the evidence block sits in the prompt, before the question. Its tokens attend to the
context sentences that share their entities (a copy of a name attends to the name's other
occurrences), which is where the next hop of a chain is; the question's cue tokens, by contrast,
keep attending to what the question names. Evidence tokens precede the question, so their rows do
not depend on it and need no null calibration.
"""

from __future__ import annotations

import torch


def evidence_cue_scores(rows: torch.Tensor, token_sentence: torch.Tensor) -> torch.Tensor:
    """Per context position, its strongest attention from any evidence token, as a distribution.

    Args:
        rows: (num_heads, E, >= n) attention of the E evidence tokens; the first n columns are
            the context.
        token_sentence: (n,) sentence id of each context position, -1 outside every sentence
            (template tokens and attention sinks, which would otherwise take most of the mass).

    Returns:
        (n,) float32 scores summing to 1 (zeros if no evidence token attends to a sentence).
    """
    n = token_sentence.shape[0]
    attention = rows[..., :n].float().mean(dim=0) * (token_sentence >= 0)  # (E, n)
    attention = attention / attention.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    best = attention.max(dim=0).values if attention.shape[0] else torch.zeros(n)
    return best / best.sum().clamp_min(1e-12)
