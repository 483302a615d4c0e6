"""ReContext behind an OpenAI-compatible server, used by LangChain and LlamaIndex through OpenAI classes.

Starts ``recontext serve`` (the embedded SmolLM2, loopback, a free port) as a child process, then:

1. LangChain: ``prompt | ChatOpenAI(base_url=...) | StrOutputParser()``. Nothing ReContext-specific
   is sent: the server takes the text before the ``Question:`` line as the context (the same rule
   as ``ChatReContext``). ``ChatOpenAI(extra_body={"documents": [...]})`` would pass them explicitly.
2. LlamaIndex: a ``SummaryIndex`` query engine over ``cookbook/data/harbor_town`` with
   ``OpenAILike(is_chat_model=True)`` as its LLM; the server recognises LlamaIndex's text-QA prompt
   and replays evidence from the chunks in it.

Each response carries the replayed sentences in a top-level ``evidence`` field, which the
frameworks do not keep; an httpx response hook reads them here.

Needs the extras ``serve``, ``serve-clients`` and ``cookbook``:
``pip install -e ".[serve,serve-clients,cookbook]"``.
Run: ``python cookbook/openai_server.py`` (offline, CPU), or against a server you started yourself,
``recontext serve --port 8000`` then ``python cookbook/openai_server.py --base-url http://127.0.0.1:8000/v1``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import httpx
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
from llama_index.core import SimpleDirectoryReader, SummaryIndex
from llama_index.llms.openai_like import OpenAILike

from recontext_engine.serve.process import ServerProcess

DATA_DIR = Path(__file__).parent / "data" / "harbor_town"
MODEL = "SmolLM2-135M-Instruct"
LANGCHAIN_QUESTION = "Who was the last keeper of the Keel Point lighthouse?"
LLAMA_INDEX_QUESTION = "In which year did the Velmora Observatory open?"
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer briefly."), ("human", "Context:\n{context}\n\nQuestion: {question}")]
)


class EvidenceLog:
    """An httpx response hook that keeps the ``evidence`` of every JSON response."""

    def __init__(self) -> None:
        self.evidence: list[dict[str, Any]] = []

    def __call__(self, response: httpx.Response) -> None:
        if response.headers.get("content-type", "").startswith("application/json"):
            response.read()
            self.evidence += response.json().get("evidence", [])

    def client(self) -> httpx.Client:
        return httpx.Client(event_hooks={"response": [self]}, timeout=600)

    def texts(self) -> list[str]:
        return [e["text"] for e in self.evidence]


def langchain_chain(base_url: str, log: EvidenceLog, max_tokens: int = 24):
    llm = ChatOpenAI(
        base_url=base_url, api_key="unused", model=MODEL, temperature=0, max_tokens=max_tokens,
        http_client=log.client(),
    )  # fmt: skip
    return PROMPT | llm | StrOutputParser()


def llama_index_query_engine(base_url: str, log: EvidenceLog, max_tokens: int = 24):
    llm = OpenAILike(
        model=MODEL, api_base=base_url, api_key="unused", is_chat_model=True, context_window=8192,
        max_tokens=max_tokens, temperature=0, http_client=log.client(),
    )  # fmt: skip
    documents = SimpleDirectoryReader(str(DATA_DIR), required_exts=[".txt"]).load_data()
    for document in documents:  # file paths and dates in the prompt would only be noise to replay
        document.excluded_llm_metadata_keys = list(document.metadata)
    return SummaryIndex.from_documents(documents).as_query_engine(llm=llm, response_mode="compact")


def run(base_url: str, max_tokens: int = 24) -> dict[str, dict[str, Any]]:
    """Both frameworks against ``base_url``; the answer and the replayed sentences of each."""
    results = {}
    context = "\n".join(path.read_text(encoding="utf-8") for path in sorted(DATA_DIR.glob("*.txt")))
    log = EvidenceLog()
    answer = langchain_chain(base_url, log, max_tokens).invoke(
        {"context": context, "question": LANGCHAIN_QUESTION}
    )
    results["langchain"] = {"question": LANGCHAIN_QUESTION, "answer": answer, "evidence": log.texts()}
    log = EvidenceLog()
    response = llama_index_query_engine(base_url, log, max_tokens).query(LLAMA_INDEX_QUESTION)
    results["llama_index"] = {
        "question": LLAMA_INDEX_QUESTION,
        "answer": str(response),
        "evidence": log.texts(),
    }
    for name, result in results.items():
        print(f"[{name}] Q: {result['question']}\n  A: {result['answer'].strip()}")
        for text in result["evidence"]:
            print(f"  evidence: {text}")
    return results


def main(base_url: str | None = None, max_tokens: int = 24) -> dict[str, dict[str, Any]]:
    """Against ``base_url``, or a server started for the run (and always stopped after it)."""
    if base_url is not None:
        return run(base_url, max_tokens)
    with ServerProcess(["--log-level", "warning"], cwd=Path(__file__).resolve().parents[1]) as server:
        return run(server.base_url, max_tokens)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None, help="a running server's /v1 URL (default: start one)")
    main(parser.parse_args().base_url)
