"""``ReContextMiddleware``: long agent sessions replay what matters from early turns and tool outputs.

Before each model call of a ``langchain.agents.create_agent`` agent, the local engine reads the
whole history (user turns, assistant turns and their tool calls, tool results) with the latest user
request as the question, and the sentences it selects are replayed, quoted as data and labelled
with their message, next to the latest message (``recontext_engine.HistoryReplayer`` says where
and why). Nothing is removed, and the change is for that call only: the agent's state keeps the
messages as they were. The agent's own model can be anything, hosted ones included.

It fails open (an error in selection leaves the call as it was and is logged once), stands down
below ``min_history_tokens`` of history, keeps the block within ``max_replay_tokens`` and within what
the agent model's window has left (``max_input_tokens``, else the model's profile), and reports what
it replayed in the response's ``response_metadata["recontext_replay"]`` and as the custom event
``recontext_history_replay``. The engine's context cache keeps the history read, so a step prefills
only the messages that are new. :meth:`ReContextMiddleware.pre_model_hook` is the same for
LangGraph's ``create_react_agent``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from recontext_engine import HistoryReplay, HistoryReplayConfig, HistoryReplayer

from .chat_models import adispatch_in_context, as_dicts, dispatch_in_context
from .selection import EngineSettings

if TYPE_CHECKING:
    from recontext_engine import ReContextEngine

logger = logging.getLogger("recontext_integrations")
REPLAY_EVENT = "recontext_history_replay"
METADATA_KEY = "recontext_replay"


def with_replay(messages: Sequence[AnyMessage], replay: HistoryReplay) -> list[AnyMessage]:
    """``messages`` with the replayed block where ``replay`` puts it: first in the latest user message,
    or after the latest tool results as a user message of its own."""
    result = list(messages)
    if not replay.replays:
        return result
    if replay.in_request:
        target = result[replay.insert_at]
        content = target.content
        if isinstance(content, str):
            new_content: Any = f"{replay.text}\n\n{content}"
        else:
            new_content = [{"type": "text", "text": replay.text + "\n\n"}, *content]
        result[replay.insert_at] = target.model_copy(update={"content": new_content})
    else:
        result.append(HumanMessage(content=replay.text, additional_kwargs={METADATA_KEY: True}))
    return result


class ReContextMiddleware(AgentMiddleware):
    """Agent middleware that replays the history's evidence for the latest request before each model call.

    ``engine``: a loaded ``ReContextEngine`` to share (else ``model``/``heads``/``device`` load one
    once per process: the embedded SmolLM2-135M-Instruct by default). ``rounds``, ``top_k`` and
    ``replay_options``: the selection settings, as for ``ChatReContext`` (unset: a history is read
    in one round with the hybrid selector or the one the engine's default config names, keeping
    picks near the best one:
    ``recontext_engine.history.HISTORY_SELECTION``).
    ``min_history_tokens``, ``max_replay_tokens``, ``max_result_tokens``, ``header``: see
    ``recontext_engine.HistoryReplayConfig``.
    ``max_input_tokens``: the agent model's window (None: its ``profile["max_input_tokens"]`` where
    it has one; else no limit but ``max_replay_tokens``).
    """

    def __init__(
        self,
        engine: ReContextEngine | None = None,
        *,
        model: str | None = None,
        heads: str | list[tuple[int, int]] = "auto",
        device: str = "cpu",
        rounds: int | None = None,
        top_k: int | None = None,
        replay_options: dict[str, Any] | None = None,
        min_history_tokens: int = 1000,
        max_replay_tokens: int = 400,
        max_result_tokens: int = HistoryReplayConfig.max_result_tokens,
        max_input_tokens: int | None = None,
        header: str | None = None,
    ) -> None:
        super().__init__()
        self.settings = EngineSettings(
            engine=engine,
            model=model,
            heads=heads,
            device=device,
            rounds=rounds,
            top_k=top_k,
            replay_options=replay_options or {},
        )
        self.history_config = HistoryReplayConfig(
            min_history_tokens=min_history_tokens,
            max_replay_tokens=max_replay_tokens,
            max_result_tokens=max_result_tokens,
            header=HistoryReplayConfig.header if header is None else header,
        )
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be >= 1, got {max_input_tokens}")
        self.max_input_tokens = max_input_tokens
        self._replayer: HistoryReplayer | None = None
        self._lock = threading.Lock()
        self._warned = False

    @property
    def replayer(self) -> HistoryReplayer:
        """The history replayer (its engine loads on first use)."""
        with self._lock:
            if self._replayer is None:
                self._replayer = HistoryReplayer(
                    self.settings.get_engine(), self.history_config, **self.settings.selection_options()
                )
            return self._replayer

    def replay(
        self, messages: Sequence[BaseMessage], request: ModelRequest | None = None
    ) -> HistoryReplay | None:
        """What would be replayed before a call with ``messages`` (those of ``request``, whose model and
        tools bound the room left; None: selection failed, logged once)."""
        try:
            return self.replayer.replay(as_dicts(messages), room_tokens=self._room(messages, request))
        except Exception:  # fail open: the agent goes on as without the middleware
            if not self._warned:
                self._warned = True
                logger.warning(
                    "ReContextMiddleware: evidence selection failed; the model call goes on without "
                    "replay (logged once)",
                    exc_info=True,
                )
            return None

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        replay = self.replay(request.messages, request)
        if replay is None:
            return handler(request)
        dispatch_in_context(replay.to_dict(), REPLAY_EVENT)
        response = handler(request.override(messages=with_replay(request.messages, replay)))
        return _reported(response, replay)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        # The engine blocks: it runs in a worker thread, so the event loop serves others meanwhile.
        replay = await asyncio.to_thread(self.replay, request.messages, request)
        if replay is None:
            return await handler(request)
        await adispatch_in_context(replay.to_dict(), REPLAY_EVENT)
        response = await handler(request.override(messages=with_replay(request.messages, replay)))
        return _reported(response, replay)

    def pre_model_hook(self, state: dict[str, Any]) -> dict[str, Any]:
        """LangGraph ``create_react_agent(..., pre_model_hook=middleware.pre_model_hook)``: the
        messages with the replay as ``llm_input_messages`` (the graph's state is left as it is)."""
        messages = state["messages"]
        replay = self.replay(messages)
        return {"llm_input_messages": with_replay(messages, replay) if replay else list(messages)}

    def _room(self, messages: Sequence[BaseMessage], request: ModelRequest | None) -> int | None:
        """What the agent model's window has left: an estimate (LangChain's approximate count of the
        messages, the system message and the tools), as the agent model's tokenizer is not known here."""
        limit = self.max_input_tokens
        if limit is None and request is not None:
            profile = getattr(request.model, "profile", None) or {}
            limit = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        if limit is None:
            return None
        counted: list[Any] = list(messages)
        if request is not None and request.system_message is not None:
            counted.insert(0, request.system_message)
        tools = list(request.tools or []) if request is not None else None
        return int(limit) - count_tokens_approximately(counted, tools=tools or None)


def _reported(response: ModelResponse, replay: HistoryReplay) -> ModelResponse:
    """The response with what was replayed in its AI message's ``response_metadata``."""
    for message in response.result:
        if message.type == "ai":
            message.response_metadata[METADATA_KEY] = replay.to_dict()
            break
    return response
