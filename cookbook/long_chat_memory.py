"""Long conversations: replay the earlier messages that answer the new question (LangChain and LlamaIndex).

Agent harnesses and chat apps keep the whole history in the prompt, and small models lose facts
said many turns ago. With ``history_as_context`` (the default of both adapters) every earlier
message is one context document: ReContext reads the history with the model's retrieval heads and
replays the messages that answer before the new question. Each evidence item names the
``message_index`` it came from, so the app can show which earlier turn it used.

- LangChain: an ``InMemoryChatMessageHistory`` fed to ``prompt | ChatReContext`` through a
  ``MessagesPlaceholder`` (``RunnableWithMessageHistory`` does the same and is deprecated).
- LlamaIndex: a ``SimpleChatEngine`` with a ``ChatMemoryBuffer``, the evidence read from the
  ``ReContextEvidenceEvent`` dispatched before the answer.

Needs: ``pip install -e ".[cookbook]"``. Run: ``python cookbook/long_chat_memory.py`` (offline,
embedded model, CPU). ``scripts/long_chat_eval.py`` measures it against plain chat.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_DOINGS = [
    "watered the plants",
    "fixed my bike",
    "baked some bread",
    "walked the dog",
    "read a novel",
    "cleaned the kitchen",
    "called my aunt",
    "went swimming",
    "painted a chair",
    "visited the market",
]
_REPLIES = ["Sounds nice!", "Good for you.", "That is great.", "Nice, thanks for sharing.", "Lovely."]


@dataclass(frozen=True)
class Fact:
    """One fact the user says once, the question that asks for it later, and the answer."""

    statement: str
    question: str
    answer: str


FACTS = [
    Fact("By the way, my gym locker number is 4172.", "What is my gym locker number?", "4172"),
    Fact("Note this: my sister is called Ingrid.", "What is my sister called?", "Ingrid"),
    Fact("My flight to Porto leaves at 6:45.", "When does my flight to Porto leave?", "6:45"),
    Fact("The wifi password at the cabin is maple88.", "What is the wifi password at the cabin?", "maple88"),
    Fact("My new dentist is Dr. Okafor.", "What is the name of my new dentist?", "Okafor"),
]


def conversation(fact: Fact, turns: int = 60, fact_turn: int = 3, seed: int = 0) -> list[dict[str, str]]:
    """``turns`` short user/assistant turns; the user states ``fact`` in turn ``fact_turn`` (1-based),
    so it is message ``2 * (fact_turn - 1)``."""
    rng = random.Random(seed)
    messages = []
    for turn in range(1, turns + 1):
        if turn == fact_turn:
            said, reply = fact.statement, "Got it, I will remember that."
        else:
            said, reply = f"On {rng.choice(_DAYS)} I {rng.choice(_DOINGS)}.", rng.choice(_REPLIES)
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": reply}]
    return messages


SYSTEM = "You are a helpful assistant. Answer briefly."


def langchain_answer(
    history: list[dict[str, str]], question: str, engine: Any = None, **settings: Any
) -> Any:
    """Ask ``question`` after ``history`` kept in an ``InMemoryChatMessageHistory``; returns the AIMessage.

    The prompt is ``[system, *history, question]``, so evidence ``message_index`` i is history
    message ``i - 1``. The new turn is added to the history afterwards, as a chat app does.
    """
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    from recontext_integrations.langchain import ChatReContext

    store = InMemoryChatMessageHistory()
    store.add_messages(
        [HumanMessage(m["content"]) if m["role"] == "user" else AIMessage(m["content"]) for m in history]
    )
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = prompt | ChatReContext(engine=engine, **settings)
    answer = chain.invoke({"history": store.messages, "question": question})
    store.add_messages([HumanMessage(question), answer])
    return answer


def llama_index_answer(
    history: list[dict[str, str]], question: str, engine: Any = None, **settings: Any
) -> tuple[str, list[dict[str, Any]]]:
    """Ask ``question`` after ``history`` through a ``SimpleChatEngine`` with a ``ChatMemoryBuffer``.

    Returns the answer and the evidence of the ``ReContextEvidenceEvent``; the LLM sees
    ``[system, *history, question]``, so ``message_index`` i is history message ``i - 1``.
    """
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.memory import ChatMemoryBuffer

    from recontext_integrations.llama_index import ReContextEvidenceEvent, ReContextLLM

    class EvidenceCatcher(BaseEventHandler):
        evidence: list = []

        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, ReContextEvidenceEvent):
                self.evidence = event.evidence

    llm = ReContextLLM(engine=engine, **settings)
    memory = ChatMemoryBuffer.from_defaults(
        chat_history=[ChatMessage(role=m["role"], content=m["content"]) for m in history],
        token_limit=llm.metadata.context_window - 1024,
    )
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory, system_prompt=SYSTEM)
    catcher, dispatcher = EvidenceCatcher(evidence=[]), get_dispatcher()
    dispatcher.add_event_handler(catcher)
    try:
        answer = str(chat.chat(question))
    finally:
        dispatcher.event_handlers.remove(catcher)
    return answer, catcher.evidence


def main(engine: Any = None, turns: int = 60, max_tokens: int = 16) -> dict[str, Any]:
    """Both frameworks on one generated conversation; prints the answers and the replayed turns."""
    fact = FACTS[0]
    history = conversation(fact, turns)
    message = langchain_answer(history, fact.question, engine, max_tokens=max_tokens)
    answer, evidence = llama_index_answer(history, fact.question, engine, max_tokens=max_tokens)
    print(f"Q: {fact.question}\nLangChain: {message.content.strip()}\nLlamaIndex: {answer.strip()}")
    for item in message.response_metadata["evidence"]:
        index = item["message_index"] - 1
        print(f"  replayed history message {index} (turn {index // 2 + 1}): {item['text']}")
    return {"langchain": message, "llama_index": (answer, evidence), "history": history, "fact": fact}


if __name__ == "__main__":
    main()
