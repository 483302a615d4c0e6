"""``ReContextMemoryBlock``: a LlamaIndex ``Memory`` block that replays what matters from a long session.

``Memory`` hands each block the active chat history (and the new input) before an LLM call; this
block has the local engine read all of it (with the messages ``Memory`` flushed out of its
short-term queue, which it keeps, so nothing said in the session is lost) with the latest user
message as the question, and returns the selected sentences, quoted as data and labelled with
their message (``recontext_engine.HistoryReplayer``). ``Memory`` puts the block's text in the system
message (its default ``insert_method``) or, with ``insert_method="user"``, first in the latest user
message: between the history and the request, where ReContext puts evidence.

It fails open (an error in selection gives an empty block, logged once), stands down below
``min_history_tokens``, keeps within ``max_replay_tokens``, and dispatches a
``ReContextEvidenceEvent`` (split rule ``"memory_block"``) with what it replayed; ``last_replay`` holds it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.memory import BaseMemoryBlock

from recontext_engine import HistoryReplay, HistoryReplayConfig, HistoryReplayer, ReplayConfig

from .base import LocalEngine
from .events import ReContextEvidenceEvent
from .tools import to_message_dicts, with_calls

logger = logging.getLogger("recontext_integrations")
dispatcher = get_dispatcher(__name__)


class ReContextMemoryBlock(LocalEngine, BaseMemoryBlock[str]):
    """A memory block with the sentences of the whole session that bear on the latest user message.

    ``Memory.from_defaults(memory_blocks=[ReContextMemoryBlock()], insert_method="user")``; the
    model (``model``/``heads``/``device`` or ``engine=``) is the one that reads the history, not
    necessarily the agent's.
    """

    name: str = Field(default="recontext_replay", description="The block's name in the memory template.")
    replay_options: dict[str, Any] = Field(
        default_factory=dict,
        description="ReplayConfig options of the selection (rounds, top_k, selector...); unset ones: "
        "the engine's defaults with recontext_engine.history.HISTORY_SELECTION (one round, the hybrid "
        "selector unless the engine names another).",
    )
    min_history_tokens: int = Field(default=1000, ge=0, description="Below this much history, no replay.")
    max_replay_tokens: int = Field(default=400, ge=1, description="The most tokens the replayed lines take.")
    max_result_tokens: int = Field(
        default=HistoryReplayConfig.max_result_tokens,
        ge=0,
        description="A picked tool call brings its tool results up to this long, whole (0: never).",
    )

    _archive: list[ChatMessage] = PrivateAttr(default_factory=list)
    _replayer: HistoryReplayer | None = PrivateAttr(default=None)
    _warned: bool = PrivateAttr(default=False)
    _last_replay: HistoryReplay | None = PrivateAttr(default=None)

    @field_validator("replay_options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        ReplayConfig().with_options(**value)  # a ReContextError (a ValueError) names a bad one
        return value

    @property
    def last_replay(self) -> HistoryReplay | None:
        """What the last ``aget`` replayed (None before any, or when selection failed)."""
        return self._last_replay

    @property
    def archive(self) -> list[ChatMessage]:
        """The messages ``Memory`` flushed out of its short-term queue, kept here, oldest first."""
        return list(self._archive)

    @property
    def replayer(self) -> HistoryReplayer:
        if self._replayer is None:
            config = HistoryReplayConfig(
                min_history_tokens=self.min_history_tokens,
                max_replay_tokens=self.max_replay_tokens,
                max_result_tokens=self.max_result_tokens,
            )
            self._replayer = HistoryReplayer(self.engine, config, **self.replay_options)
        return self._replayer

    def replay(self, messages: list[ChatMessage]) -> HistoryReplay | None:
        """What the block replays for ``messages`` after the archived ones (None: selection failed)."""
        try:
            return self.replayer.replay(with_calls(to_message_dicts([*self._archive, *messages])))
        except Exception:  # fail open: the memory goes on without this block
            if not self._warned:
                self._warned = True
                logger.warning(
                    "ReContextMemoryBlock: evidence selection failed; empty block (logged once)",
                    exc_info=True,
                )
            return None

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        # The engine blocks: it runs in a worker thread, so the event loop serves others meanwhile.
        replay = await asyncio.to_thread(self.replay, list(messages or []))
        self._last_replay = replay
        if replay is None or not replay.replays:
            return ""
        dispatcher.event(
            ReContextEvidenceEvent(
                evidence=[e.to_dict() for e in replay.evidence],
                question=replay.request,
                split_rule="memory_block",
                model_name=self.engine.model_name,
            )
        )
        return replay.text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Messages flushed from the short-term queue: kept, and read with the active ones."""
        self._archive.extend(messages)
