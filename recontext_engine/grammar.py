"""Grammar-constrained decoding on the transformers backend: a JSON Schema becomes a mask over the
vocabulary at every step (xgrammar, the library vLLM and SGLang use for the same job).

The grammar is compact JSON (separators ``","`` and ``":"``, no free whitespace: a small model can
otherwise spend its whole budget on newlines), the grammar vLLM builds under
``structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True}``, which the
vLLM backend sets, so both backends enforce the same language.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import torch

from .errors import InputError

# vLLM's separators for disable_any_whitespace (vllm/v1/structured_output/backend_xgrammar.py)
SEPARATORS = (",", ":")


class SchemaMask:
    """One generation's constraint: ``apply`` masks the logits, ``accept`` advances past a token."""

    def __init__(self, matcher: Any, bitmask: torch.Tensor) -> None:
        self.matcher = matcher
        self.bitmask = bitmask

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (vocab,) with every token the grammar forbids at -inf."""
        import xgrammar

        self.matcher.fill_next_token_bitmask(self.bitmask)
        masked = logits[None].clone()
        xgrammar.apply_token_bitmask_inplace(masked, self.bitmask)
        return masked[0]

    def accept(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise RuntimeError(f"the grammar rejected token {token} it had allowed")


class SchemaCompiler:
    """Compiles JSON Schemas against one tokenizer, keeping the latest ``cache_size`` grammars."""

    def __init__(self, tokenizer: Any, vocab_size: int, cache_size: int = 32) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.cache_size = cache_size
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self._compiler: Any = None
        self._lock = threading.Lock()

    def mask(self, schema: dict[str, Any], stop_ids: Iterable[int]) -> SchemaMask:
        """A fresh constraint for one generation under ``schema``; once the JSON is complete only
        ``stop_ids`` (the generation's end tokens) are allowed."""
        import xgrammar

        # not sort_keys: the order of "properties" is the order the JSON is written in
        compiled = self._compile(json.dumps(schema))
        matcher = xgrammar.GrammarMatcher(compiled, override_stop_tokens=sorted(stop_ids))
        return SchemaMask(matcher, xgrammar.allocate_token_bitmask(1, self.vocab_size))

    def _compile(self, key: str) -> Any:
        import xgrammar

        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                return self._compiled[key]
            if self._compiler is None:
                info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
                self._compiler = xgrammar.GrammarCompiler(info, max_threads=1)
            try:
                compiled = self._compiler.compile_json_schema(
                    key, any_whitespace=False, separators=SEPARATORS
                )
            except Exception as error:  # checked before generation; here only as a last guard
                raise InputError(f"json_schema cannot be enforced: {error}") from None
            self._compiled[key] = compiled
            while len(self._compiled) > self.cache_size:
                self._compiled.popitem(last=False)
            return compiled
