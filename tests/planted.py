"""Helpers shared by the head-detection and scorer tests: a tiny Llama with a planted retrieval head.

The planted head (1, 2) matches tokens by identity: its query and key projections read the same
"code" dimensions of the token embeddings, and rotary position is switched off, so a cue token
(the question's key word, e.g. a name) attends to the same word in the context: the gold fact.
Every other head keeps its random weights. The tokenizer is word-level over every word the
calibration generator can emit.
"""

from __future__ import annotations

import re

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from recontext_engine.heads import calibration
from recontext_engine.heads.calibration import make_cases

PLANTED = (1, 2)
HIDDEN, HEADS, CODE = 256, 4, 64


def _vocabulary() -> list[str]:
    """Every word the generator can emit (numbers are split into digits by the pre-tokenizer)."""
    # Public names only: dunders such as __file__ would make the vocabulary (and so the random
    # weights) depend on where the checkout lives.
    public = [value for name, value in vars(calibration).items() if not name.startswith("_")]
    texts = [str(v) for v in public if isinstance(v, str)]
    for value in public:
        if isinstance(value, tuple):
            texts += [str(v) for v in value]
    for case in make_cases(60, seed=123):
        texts += [*case.documents, case.question]
    texts += ["Context", "Question", "Answer", "N/A", "Key sentences quoted"]
    words = {w for text in texts for w in re.findall(r"\w+|[^\w\s]+", text)}
    return sorted(words | set("0123456789"))


def word_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer over the generator's vocabulary (digits one by one), no chat template."""
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for word in _vocabulary():
        vocab.setdefault(word, len(vocab))
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="[UNK]", bos_token="<s>", eos_token="</s>"
    )


def planted_model(vocab_size: int) -> transformers.LlamaForCausalLM:
    """A 2-layer, 4-head Llama, no rotary position, head (1, 2) an identity-matching retriever."""
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    head_dim = HIDDEN // HEADS
    layer, head = PLANTED
    with torch.no_grad():
        # Token codes live in the first CODE hidden dims, the rest is noise.
        codes = torch.nn.functional.normalize(torch.randn(vocab_size, CODE), dim=-1) * 8.0
        model.model.embed_tokens.weight.copy_(torch.cat([codes, torch.randn(vocab_size, HIDDEN - CODE)], -1))
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(4.0)  # random heads attend unevenly too, not uniformly
        attention = model.model.layers[layer].self_attn
        rows = slice(head * head_dim, (head + 1) * head_dim)
        for proj in (attention.q_proj, attention.k_proj):
            proj.weight[rows] = 0.0
            proj.weight[rows, :CODE] = 2.0 * torch.eye(CODE)
        model.model.rotary_emb.inv_freq.zero_()  # no position: attention by content only
    return model.eval()
