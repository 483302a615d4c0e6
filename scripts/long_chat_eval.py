"""Long conversations: ReContext replay of earlier turns vs plain chat over the same history.

For each case (one of the cookbook's facts, its own seed) a ``--turns``-turn conversation is
generated with the fact said by the user in turn ``--fact-turn``; then the question is asked.
Methods, on the same messages ``[system, *history, question]``:

- ``plain``: the chat template over all messages, no replay (what a chat model does);
- ``recontext``: ``prompt | ChatReContext`` over an ``InMemoryChatMessageHistory`` (the cookbook recipe):
  every earlier message is a context document and the selected ones are replayed.

Figures: evidence recall (the fact's message among the replayed ones, by ``message_index``),
accuracy (the answer holds the expected string, case-insensitive), seconds per case.
Run: ``HF_HUB_OFFLINE=1 python scripts/long_chat_eval.py [--cases 5] [--turns 60] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _recipe() -> Any:
    spec = importlib.util.spec_from_file_location(
        "long_chat_memory", ROOT / "cookbook" / "long_chat_memory.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run(cases: int, turns: int, fact_turn: int, max_tokens: int) -> dict[str, Any]:
    from recontext_engine import ReContextEngine
    from recontext_engine.messages import chat_messages

    recipe = _recipe()
    engine = ReContextEngine.from_pretrained()
    rows = []
    for case in range(cases):
        fact = recipe.FACTS[case % len(recipe.FACTS)]
        history = recipe.conversation(fact, turns, fact_turn, seed=case)
        fact_index = 2 * (fact_turn - 1)
        messages = [
            {"role": "system", "content": recipe.SYSTEM},
            *history,
            {"role": "user", "content": fact.question},
        ]
        started = time.perf_counter()
        plain = engine.chat(chat_messages(messages), max_new_tokens=max_tokens)
        plain_s = time.perf_counter() - started
        started = time.perf_counter()
        message = recipe.langchain_answer(history, fact.question, engine, max_tokens=max_tokens)
        replay_s = time.perf_counter() - started
        evidence = message.response_metadata["evidence"]
        rows.append(
            {
                "case": case,
                "fact": fact.statement,
                "prompt_tokens": plain.usage.input_tokens,
                "plain_answer": plain.text,
                "plain_correct": fact.answer.lower() in plain.text.lower(),
                "recontext_answer": message.content,
                "recontext_correct": fact.answer.lower() in message.content.lower(),
                "recall": any(item["message_index"] - 1 == fact_index for item in evidence),
                "replayed_messages": [item["message_index"] - 1 for item in evidence],
                "plain_s": plain_s,
                "recontext_s": replay_s,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    n = len(rows)
    summary = {
        "cases": n,
        "turns": turns,
        "fact_turn": fact_turn,
        "mean_prompt_tokens": sum(r["prompt_tokens"] for r in rows) / n,
        "evidence_recall": sum(r["recall"] for r in rows) / n,
        "accuracy_plain": sum(r["plain_correct"] for r in rows) / n,
        "accuracy_recontext": sum(r["recontext_correct"] for r in rows) / n,
        "time_ratio": sum(r["recontext_s"] for r in rows) / sum(r["plain_s"] for r in rows),
    }
    return {"summary": summary, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--fact-turn", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="write rows and summary here")
    args = parser.parse_args()
    if args.cases < 1 or not 1 <= args.fact_turn <= args.turns:
        parser.error("--cases must be >= 1 and --fact-turn between 1 and --turns")
    result = run(args.cases, args.turns, args.fact_turn, args.max_tokens)
    print(json.dumps(result["summary"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
