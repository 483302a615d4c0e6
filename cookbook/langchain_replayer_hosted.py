"""Evidence replay in front of any chat model, hosted ones included.

A hosted API returns no attention, so it cannot run ReContext itself. Here the local model reads
the documents, its retrieval heads pick the evidence, and ``ReContextReplayer`` appends it as
the last document; the prompt ``[C; E; q]`` then goes to whatever chat model the chain uses
(``ChatOpenAI``, ``ChatAnthropic``, ...). Offline, the default stand-in is the embedded 135M
model as plain chat (``question_marker=None``: the prompt goes through as it is, as it would to
an API); a model that small may still answer wrongly, a hosted one reads the same evidence.
Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/langchain_replayer_hosted.py``.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from recontext_integrations.langchain import ChatReContext, ReContextReplayer
from recontext_integrations.langchain.replayer import format_replay_prompt

DOCUMENTS = [
    Document(
        page_content="Ada lives in the city of Lisbon. Ada works as a pilot. Ada has two cats.",
        metadata={"source": "people/ada.txt"},
        id="ada",
    ),
    Document(
        page_content="Bruno lives in the city of Oslo. Bruno works as a baker. Bruno plays chess.",
        metadata={"source": "people/bruno.txt"},
        id="bruno",
    ),
    Document(
        page_content="Chloe lives in the city of Nairobi. Chloe works as a nurse. Chloe runs marathons.",
        metadata={"source": "people/chloe.txt"},
        id="chloe",
    ),
]
QUESTION = "In which city does Bruno live?"


def build_chain(chat_model: BaseChatModel, engine: Any = None, top_k: int = 2) -> Any:
    """``replayer -> prompt string -> chat_model``; the output keeps documents, prompt and answer."""
    replayer = ReContextReplayer(engine=engine, rounds=1, top_k=top_k)
    return (
        replayer
        | RunnablePassthrough.assign(prompt=RunnableLambda(format_replay_prompt))
        | RunnablePassthrough.assign(answer=itemgetter("prompt") | chat_model | StrOutputParser())
    )


def main(
    chat_model: BaseChatModel | None = None, *, engine: Any = None, callbacks: Callbacks = None
) -> dict[str, Any]:
    """Answer :data:`QUESTION` over :data:`DOCUMENTS` with replayed evidence in the prompt."""
    if chat_model is None:
        chat_model = ChatReContext(engine=engine, question_marker=None, max_tokens=16)
    out = build_chain(chat_model, engine).invoke(
        {"question": QUESTION, "documents": DOCUMENTS}, config={"callbacks": callbacks}
    )
    evidence = out["documents"][-1]
    print("Evidence:", evidence.page_content, sep="\n")
    print("From:", evidence.metadata["source_documents"])
    print("Answer:", out["answer"])
    return out


if __name__ == "__main__":
    main()
