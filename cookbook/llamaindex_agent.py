"""Agent: ``FunctionAgent(tools=[...], llm=ReContextLLM(...))`` over a tool that returns a long text.

The tool reads a 14 KB shipping log (about 300 sentences, one of them the answer). Its output comes
back as a tool message; on the next LLM call ReContextLLM takes it as context, replays the
sentences its retrieval heads point at, and answers from them. The evidence is in the answer's
``raw["evidence"]`` (and in ``ReContextEvidenceEvent``), each item naming the message it came
from: the tool's. Then ``structured_predict`` fills a pydantic object, its JSON Schema enforced
token by token. Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/llamaindex_agent.py`` (offline, CPU).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ToolCall
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from recontext_integrations.llama_index import ReContextLLM

LOG = Path(__file__).parent / "data" / "shipping_log.txt"
QUESTION = "What padlock code sealed the cold-storage hold of the Halcyon?"
ANSWER = "5816"


def read_shipping_log() -> str:
    """Read the North Sea shipping log of the autumn season: ships, cargo, crews and inspections."""
    return LOG.read_text(encoding="utf-8")


class Voyage(BaseModel):
    """One voyage of the log."""

    ship: str
    port: str
    crew: int


async def run_agent(llm: ReContextLLM) -> dict[str, Any]:
    # A 135M model does not decide on its own to read the log: the first step must call the tool
    # (constrained to a valid call); after the tool result, "auto": the model answers from it.
    tool = FunctionTool.from_defaults(read_shipping_log)
    agent = FunctionAgent(tools=[tool], llm=llm, initial_tool_choice="read_shipping_log")
    handler = agent.run(QUESTION, max_iterations=4)
    calls = [event async for event in handler.stream_events() if isinstance(event, ToolCall)]
    output = await handler
    return {"calls": calls, "output": output, "evidence": output.raw["evidence"]}


def main(engine: Any = None, max_tokens: int = 24) -> dict[str, Any]:
    """Run the agent, then a structured prediction; returns the calls, answer, evidence and object."""
    llm = ReContextLLM(engine=engine, max_tokens=max_tokens)
    result = asyncio.run(run_agent(llm))
    print("Called:", *(f"{c.tool_name}({c.tool_kwargs})" for c in result["calls"]))
    print(f"Q: {QUESTION}\nA: {result['output'].response.content}")
    evidence = result["evidence"]
    print("Evidence (from message", sorted({e["message_index"] for e in evidence}), "):")
    print(*(e["text"] for e in evidence), sep="\n  ")
    line = "Day 3. The Halcyon left Cork carrying coffee sacks with a crew of 10."
    prompt = PromptTemplate("Context: {line}\nQuestion: Which ship, from which port, with how many crew?")
    result["voyage"] = llm.structured_predict(Voyage, prompt, llm_kwargs={"max_tokens": 48}, line=line)
    print("Structured:", repr(result["voyage"]))
    return result


if __name__ == "__main__":
    main()
