"""Long agent sessions: does the agent still answer from a fact stated 50-300 messages ago?

``python -m recontext_integrations.langchain.session_bench --out DIR [--sessions N] [--seed S]
[--arms a,b,...] [--max-tokens N]``: the seeded sessions of :mod:`recontext_engine.bench.sessions`
(tool outputs, a fact stated early, an old value corrected later), each answered by a
``langchain.agents.create_agent`` agent whose model is the embedded engine without replay of its own
(``ChatReContext(rounds=0)``), the history given whole. The arms differ in their middleware only:

- ``full``: none (the whole history);
- ``recontext``: ``ReContextMiddleware`` (the history's evidence replayed next to the request);
- ``bm25``: the same middleware, one round of BM25 instead of the model's retrieval heads (its
  picks within the margin, lone evidence off);
- ``summarization``: LangChain's ``SummarizationMiddleware`` (the same model summarises; it fires
  above half of the session's approximate tokens and keeps the last ``--keep-messages`` messages);
- ``context_editing``: LangChain's ``ContextEditingMiddleware(ClearToolUsesEdit(keep=3))`` (old
  tool outputs cleared above half of the session's approximate tokens).

Measured per session and arm: the answer (correct: it holds the answer; superseded facts: whether
it gives the old value), whether the fact's message is among the replayed ones (replay arms),
whether the answer was in what the model was sent at all, the tokens sent, the seconds of the model
calls, of the replay and of the whole step. Every arm starts each session cold (the engine's context
cache emptied); the ``recontext`` arm then takes one more step (its answer and the question again)
with the cache warm, to time the replay a step adds once the history read is cached.
Writes ``results.json``, ``report.md`` and ``accuracy.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    ModelRequest,
    ModelResponse,
    SummarizationMiddleware,
)
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import BaseTool, tool
from tqdm.auto import tqdm

from recontext_engine.bench.sessions import Session, SessionConfig, make_sessions, mentions

from .chat_models import ChatReContext, as_dicts
from .middleware import METADATA_KEY, ReContextMiddleware

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult
    from langchain_core.runnables import RunnableConfig

    from recontext_engine import ReContextEngine

ARMS = ("full", "recontext", "bm25", "summarization", "context_editing")
REPLAY_ARMS = ("recontext", "bm25")
TARGET_REPLAYED = 0.90
TARGET_WARM_RATIO = 0.2
NO_OUTPUT = "(no new output since the last call)"


# -- the session's tools: the names and arguments the generated calls use ----------------------


@tool
def list_files(path: str) -> str:
    """List the files under a directory."""
    return NO_OUTPUT


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return NO_OUTPUT


@tool
def run_tests(target: str) -> str:
    """Run the tests under a path."""
    return NO_OUTPUT


@tool
def search_logs(query: str) -> str:
    """Search the service logs."""
    return NO_OUTPUT


@tool
def query_db(sql: str) -> str:
    """Run a read-only SQL query."""
    return NO_OUTPUT


@tool
def git_log(limit: int) -> str:
    """Show the latest commits."""
    return NO_OUTPUT


# The generator's calls name these tools (recontext_engine.bench.sessions.TOOL_NAMES, in this order).
TOOLS: list[BaseTool] = [list_files, read_file, run_tests, search_logs, query_db, git_log]


# -- measurement --------------------------------------------------------------------------------


@dataclass
class ModelCall:
    """One call of the agent model, as the innermost middleware saw it."""

    messages: int
    input_tokens: int  # the model's own count of its prompt (chat template and tools included)
    message_tokens: int  # the engine's tokenizer over the messages' text
    approx_tokens: int  # LangChain's count_tokens_approximately over the messages
    seconds: float
    answer_in_prompt: bool
    text: str = ""
    tool_calls: int = 0
    replay: dict[str, Any] | None = None  # the ReContextMiddleware report, where one ran


class _Recorder(AgentMiddleware):
    """Innermost middleware: times the model call and counts what it is sent. The call number
    ``max_calls`` is made without tools, so that a step ends with an answer."""

    def __init__(self, engine: ReContextEngine, answer: str, max_calls: int) -> None:
        super().__init__()
        self.engine, self.answer, self.max_calls = engine, answer, max_calls
        self.calls: list[ModelCall] = []
        self._messages: list[AIMessage] = []

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        if len(self.calls) + 1 >= self.max_calls:
            request = request.override(tools=[])
        texts = [m["content"] for m in as_dicts(request.messages)]
        started = time.perf_counter()
        response = handler(request)
        seconds = time.perf_counter() - started
        message = next((m for m in response.result if isinstance(m, AIMessage)), AIMessage(content=""))
        usage: dict[str, Any] = dict(message.usage_metadata or {})
        self.calls.append(
            ModelCall(
                messages=len(request.messages),
                input_tokens=int(usage.get("input_tokens", 0)),
                message_tokens=sum(self.engine.count_tokens(t) for t in texts if t),
                approx_tokens=count_tokens_approximately(request.messages),
                seconds=seconds,
                answer_in_prompt=any(mentions(t, self.answer) for t in texts),
                text=message.text,
                tool_calls=len(message.tool_calls),
            )
        )
        self._messages.append(message)
        return response

    def reports(self) -> None:
        """Copy each call's replay report (the ReContext middleware, outside this one, writes it into
        the same AI message after the call returns)."""
        for call, message in zip(self.calls, self._messages):
            call.replay = message.response_metadata.get(METADATA_KEY)


class _SummaryTimer(BaseCallbackHandler):
    """Times the summarising model's calls and adds up their tokens."""

    def __init__(self) -> None:
        self.calls, self.seconds, self.input_tokens = 0, 0.0, 0
        self._started: dict[Any, float] = {}

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._started[run_id] = time.perf_counter()

    def on_llm_end(self, response: LLMResult, *, run_id: Any, **kwargs: Any) -> None:
        self.calls += 1
        self.seconds += time.perf_counter() - self._started.pop(run_id, time.perf_counter())
        for generations in response.generations:
            for generation in generations:
                usage = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
                self.input_tokens += int(usage.get("input_tokens", 0))

    def reset(self) -> None:
        self.calls, self.seconds, self.input_tokens = 0, 0.0, 0


@dataclass
class Row:
    """One step of one arm on one session: ``step`` "answer" (cold, measured for accuracy) or
    "warm" (the recontext arm's next step, the context cache warm)."""

    arm: str
    session: int
    kind: str
    topic: str
    step: str
    messages: int
    session_tokens: int
    answer: str
    text: str
    correct: bool
    said_old: bool | None  # superseded: the reply holds the old value
    fact_replayed: bool | None  # replay arms: the fact's message is among those replayed
    old_replayed: bool | None  # superseded, replay arms: the old statement is too
    replay_status: str | None
    replayed_messages: list[int]
    answer_in_prompt: bool  # the first model call was sent the answer somewhere
    tokens_sent: int  # input tokens of the step's model calls (the model's own count)
    message_tokens: int
    approx_tokens: int
    model_calls: int
    model_s: float
    replay_s: float
    replay_cached_tokens: int
    summary_calls: int
    summary_s: float
    summary_tokens: int
    total_s: float
    error: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class BenchConfig:
    """The run's settings (written into results.json)."""

    sessions: int = 20
    seed: int = 0
    arms: tuple[str, ...] = ARMS
    max_tokens: int = 48
    summary_tokens: int = 160
    keep_messages: int = 20
    clear_keep: int = 3
    max_model_calls: int = 2
    scale: float = 1.0
    min_messages: int = 50
    max_messages: int = 300
    min_session_tokens: int = 2000
    max_session_tokens: int = 6000
    model: str | None = None
    header: str | None = None  # the replay arms' block header (None: the middleware's default)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.arms) - set(ARMS))
        if unknown:
            raise ValueError(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
        if self.max_model_calls < 1:
            raise ValueError("max_model_calls must be >= 1")

    def session_config(self) -> SessionConfig:
        return SessionConfig(
            min_messages=self.min_messages,
            max_messages=self.max_messages,
            min_tokens=self.min_session_tokens,
            max_tokens=self.max_session_tokens,
            scale=self.scale,
        )


class _Arms:
    """Builds each arm's agent for a session; one engine, one agent model, one summariser."""

    def __init__(self, engine: ReContextEngine, config: BenchConfig) -> None:
        self.engine, self.config = engine, config
        self.model = ChatReContext(engine=engine, rounds=0, max_tokens=config.max_tokens)
        self.summary_timer = _SummaryTimer()
        self.summarizer = ChatReContext(
            engine=engine, rounds=0, max_tokens=config.summary_tokens, callbacks=[self.summary_timer]
        )

    def middleware(self, arm: str, session_messages: Sequence[BaseMessage]) -> list[AgentMiddleware]:
        # the edits fire above half of the session's size, as LangChain counts it
        trigger = max(1, count_tokens_approximately(list(session_messages)) // 2)
        if arm == "recontext":
            return [ReContextMiddleware(engine=self.engine, min_history_tokens=0, header=self.config.header)]
        if arm == "bm25":
            return [
                ReContextMiddleware(
                    engine=self.engine,
                    min_history_tokens=0,
                    rounds=1,
                    replay_options={"selector": "bm25", "standout": 0.0},  # BM25's own picks
                    header=self.config.header,
                )
            ]
        if arm == "summarization":
            return [
                SummarizationMiddleware(
                    self.summarizer,
                    trigger=("tokens", trigger),
                    keep=("messages", self.config.keep_messages),
                )
            ]
        if arm == "context_editing":
            return [
                ContextEditingMiddleware(
                    edits=[ClearToolUsesEdit(trigger=trigger, keep=self.config.clear_keep)]
                )
            ]
        return []

    def step(
        self, arm: str, session: Session, messages: Sequence[BaseMessage], step: str
    ) -> tuple[Row, list[BaseMessage]]:
        """One invocation of the arm's agent on ``messages``; the row and the messages after it."""
        recorder = _Recorder(self.engine, session.answer, self.config.max_model_calls)
        agent = create_agent(self.model, tools=TOOLS, middleware=[*self.middleware(arm, messages), recorder])
        self.summary_timer.reset()
        error, after = None, list(messages)
        state: Any = {"messages": list(messages)}
        # a model node and a tools node per call, and the middleware's own nodes
        run_config: RunnableConfig = {"recursion_limit": 4 * self.config.max_model_calls + 4}
        started = time.perf_counter()
        try:
            after = agent.invoke(state, config=run_config)["messages"]
        except Exception as exc:  # a failed step is a wrong answer, reported
            error = f"{type(exc).__name__}: {exc}"[:500]
        total = time.perf_counter() - started
        recorder.reports()
        return self._row(arm, session, step, recorder.calls, total, error), list(after)

    def _row(
        self, arm: str, session: Session, step: str, calls: list[ModelCall], total: float, error: str | None
    ) -> Row:
        text = calls[-1].text if calls else ""
        replays = [c.replay for c in calls if c.replay is not None]
        first = replays[0] if replays else None
        replayed = sorted({int(e["message_index"]) for e in first["evidence"]}) if first else []
        old = session.superseded_answer
        replay_arm = arm in REPLAY_ARMS
        return Row(
            arm=arm,
            session=session.index,
            kind=session.kind,
            topic=session.topic,
            step=step,
            messages=len(session.messages),
            session_tokens=session.tokens,
            answer=session.answer,
            text=text,
            correct=mentions(text, session.answer),
            said_old=mentions(text, old) if old is not None else None,
            fact_replayed=session.fact_message in replayed if replay_arm else None,
            old_replayed=(session.superseded_message in replayed) if replay_arm and old is not None else None,
            replay_status=first["status"] if first else None,
            replayed_messages=replayed,
            answer_in_prompt=calls[0].answer_in_prompt if calls else False,
            tokens_sent=sum(c.input_tokens for c in calls),
            message_tokens=sum(c.message_tokens for c in calls),
            approx_tokens=sum(c.approx_tokens for c in calls),
            model_calls=len(calls),
            model_s=sum(c.seconds for c in calls),
            replay_s=sum(float(r["seconds"]) for r in replays),
            replay_cached_tokens=sum(int(r["cached_tokens"]) for r in replays),
            summary_calls=self.summary_timer.calls,
            summary_s=self.summary_timer.seconds,
            summary_tokens=self.summary_timer.input_tokens,
            total_s=total,
            error=error,
            calls=[{k: v for k, v in asdict(c).items() if k != "replay"} for c in calls],
        )

    def run_session(self, arm: str, session: Session) -> list[Row]:
        """The arm on one session, cold; for ``recontext`` then one warm step (its answer and the
        question again)."""
        if self.engine.context_cache is not None:
            self.engine.context_cache.clear()  # every arm and session starts cold
        messages = convert_to_messages(session.prompt_messages())
        row, after = self.step(arm, session, messages, "answer")
        rows = [row]
        if arm == "recontext" and row.error is None:
            warm, _ = self.step(arm, session, [*after, HumanMessage(session.question)], "warm")
            rows.append(warm)
        return rows


def run(engine: ReContextEngine, config: BenchConfig, sessions: Sequence[Session] | None = None) -> list[Row]:
    """Every arm on every session, arm after arm."""
    if sessions is None:
        sessions = make_sessions(config.sessions, config.seed, config.session_config(), engine.count_tokens)
    arms = _Arms(engine, config)
    rows: list[Row] = []
    for arm in config.arms:
        for session in tqdm(sessions, desc=arm, unit="session"):
            rows += arms.run_session(arm, session)
    return rows


# -- summary and report ------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class ArmSummary:
    """The figures of one arm over its cold steps (and the recontext arm's warm steps)."""

    arm: str
    sessions: int
    accuracy: float
    fact_replayed: float | None
    answer_in_prompt: float
    tokens_sent: float
    summary_tokens: float  # the summarising model's prompt tokens in a step (summarization arm)
    model_s: float
    replay_s: float | None
    total_s: float
    warm_replay_s: float | None
    warm_model_s: float | None
    warm_ratio: float | None  # warm replay seconds / warm model seconds
    warm_cached_share: float | None  # the share of the history read the warm replay found cached
    superseded: int
    superseded_accuracy: float | None
    superseded_old: float | None  # superseded: answered the old value (and not the new)
    errors: int
    by_kind: dict[str, float]


def summarize(rows: Sequence[Row]) -> list[ArmSummary]:
    summaries = []
    for arm in dict.fromkeys(r.arm for r in rows):
        cold = [r for r in rows if r.arm == arm and r.step == "answer"]
        warm = [r for r in rows if r.arm == arm and r.step == "warm"]
        old = [r for r in cold if r.said_old is not None]
        replayed = [r.fact_replayed for r in cold if r.fact_replayed is not None]
        warm_model = sum(r.model_s for r in warm)
        history = sum(r.session_tokens for r in warm)
        summaries.append(
            ArmSummary(
                arm=arm,
                sessions=len(cold),
                accuracy=sum(r.correct for r in cold) / max(1, len(cold)),
                fact_replayed=_mean([float(v) for v in replayed]),
                answer_in_prompt=sum(r.answer_in_prompt for r in cold) / max(1, len(cold)),
                tokens_sent=_mean([r.tokens_sent for r in cold]) or 0.0,
                summary_tokens=_mean([r.summary_tokens for r in cold]) or 0.0,
                model_s=_mean([r.model_s for r in cold]) or 0.0,
                replay_s=_mean([r.replay_s for r in cold]) if arm in REPLAY_ARMS else None,
                total_s=_mean([r.total_s for r in cold]) or 0.0,
                warm_replay_s=_mean([r.replay_s for r in warm]),
                warm_model_s=_mean([r.model_s for r in warm]),
                warm_ratio=sum(r.replay_s for r in warm) / warm_model if warm and warm_model > 0 else None,
                warm_cached_share=sum(r.replay_cached_tokens for r in warm) / history
                if warm and history
                else None,
                superseded=len(old),
                superseded_accuracy=_mean([float(r.correct) for r in old]),
                superseded_old=_mean([float(bool(r.said_old) and not r.correct) for r in old]),
                errors=sum(r.error is not None for r in cold),
                by_kind={
                    kind: sum(r.correct for r in cold if r.kind == kind)
                    / sum(1 for r in cold if r.kind == kind)
                    for kind in dict.fromkeys(r.kind for r in cold)
                },
            )
        )
    return summaries


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(summaries: Sequence[ArmSummary]) -> str:
    """The main table (markdown)."""
    lines = [
        "| arm | sessions | accuracy | fact replayed | answer in prompt | tokens sent | summariser tokens | "
        "model s/step | replay s/step | step s | warm replay s | warm model s | warm replay/model | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s.arm} | {s.sessions} | {_pct(s.accuracy)} | {_pct(s.fact_replayed)} | "
        f"{_pct(s.answer_in_prompt)} | {s.tokens_sent:.0f} | {s.summary_tokens:.0f} | {s.model_s:.2f} | "
        f"{_num(s.replay_s)} | "
        f"{s.total_s:.2f} | "
        f"{_num(s.warm_replay_s)} | {_num(s.warm_model_s)} | {_num(s.warm_ratio)} | {s.errors} |"
        for s in summaries
    ]
    return "\n".join(lines)


def targets(summaries: Sequence[ArmSummary]) -> list[tuple[str, str, str, str]]:
    """(target, goal, measured, status) for the issue's three targets."""
    by_arm = {s.arm: s for s in summaries}
    ours = by_arm.get("recontext")
    if ours is None:
        return [("all", "needs the recontext arm", "-", "N/A")]
    found: list[tuple[str, str, str, str]] = []
    replayed = ours.fact_replayed
    found.append(
        (
            "fact replayed (recontext)",
            f">= {TARGET_REPLAYED:.2f}",
            _num(replayed),
            "N/A" if replayed is None else ("PASS" if replayed >= TARGET_REPLAYED else "MISS"),
        )
    )
    others = [s for s in summaries if s.arm != "recontext"]
    best = max(others, key=lambda s: s.accuracy, default=None)
    found.append(
        (
            "accuracy above every other arm",
            f"> {best.arm} ({_pct(best.accuracy)})" if best else "other arms",
            _pct(ours.accuracy),
            "N/A" if best is None else ("PASS" if ours.accuracy > best.accuracy else "MISS"),
        )
    )
    ratio = ours.warm_ratio
    found.append(
        (
            "added latency per step, cache warm",
            f"<= {TARGET_WARM_RATIO}x the model call",
            _num(ratio),
            "N/A" if ratio is None else ("PASS" if ratio <= TARGET_WARM_RATIO else "MISS"),
        )
    )
    return found


def report(
    summaries: Sequence[ArmSummary],
    config: BenchConfig,
    model: str,
    seconds: float,
    sessions: Sequence[Session] = (),
) -> str:
    kinds = list(dict.fromkeys(k for s in summaries for k in s.by_kind))
    sizes = ""
    if sessions:
        counts, tokens = [len(s.messages) for s in sessions], [s.tokens for s in sessions]
        sizes = (
            f"Sessions: {len(sessions)}, {min(counts)}-{max(counts)} messages, {min(tokens)}-{max(tokens)} "
            "tokens of history (the engine's tokenizer, with the prompt's per-message overhead).\n\n"
        )
    lines = [
        "# Long agent sessions",
        "",
        f"Model {model} (agent model: `ChatReContext(rounds=0, max_tokens={config.max_tokens})`); "
        f"{config.sessions} sessions (seed {config.seed}, {config.min_messages}-{config.max_messages} "
        f"messages and {config.min_session_tokens}-{config.max_session_tokens} tokens at scale "
        f"{config.scale}); `python -m recontext_integrations.langchain.session_bench`, "
        f"{seconds / 60:.1f} min.",
        "",
        sizes + "Accuracy: the final reply holds the answer (as a whole word or number). Fact replayed: the "
        "fact's message is among those the middleware replayed. Answer in prompt: the answer is anywhere "
        "in what the model was sent (summaries and cleared tool outputs can lose it). Tokens sent: the "
        "agent model's prompt tokens in a step (chat template and tool instructions included); the "
        "summariser's prompt is counted apart. Seconds are per step (one question; up to "
        f"{config.max_model_calls} model calls, the last one without tools); each step starts cold; the "
        "warm step is the recontext arm's next one (its answer and the question again), and warm "
        "replay/model is its replay seconds over its model seconds.",
        "",
        table(summaries),
        "",
        "## By kind of fact",
        "",
        "| arm | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    lines += [f"| {s.arm} | " + " | ".join(_pct(s.by_kind.get(k)) for k in kinds) + " |" for s in summaries]
    lines += [
        "",
        "## Superseded facts (an old value, corrected later)",
        "",
        "| arm | sessions | gave the new value | gave the old value only |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {s.arm} | {s.superseded} | {_pct(s.superseded_accuracy)} | {_pct(s.superseded_old)} |"
        for s in summaries
    ]
    lines += ["", "## Targets", "", "| target | goal | measured | status |", "|---|---|---:|---|"]
    lines += [
        f"| {name} | {goal} | {measured} | {status} |" for name, goal, measured, status in targets(summaries)
    ]
    return "\n".join(lines) + "\n"


def plot(summaries: Sequence[ArmSummary], path: Path) -> None:
    """Accuracy per arm, a bar each (matplotlib, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.2, 4.0), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    names = [s.arm.replace("_", "\n") for s in summaries]
    values = [100 * s.accuracy for s in summaries]
    colors = ["#d62728" if s.arm == "recontext" else "#7f7f7f" for s in summaries]
    bars = axes.bar(names, values, color=colors)
    axes.bar_label(bars, labels=[f"{v:.0f}%" for v in values])
    axes.set_ylim(0, 105)
    axes.set_ylabel("accuracy (%)")
    axes.set_title("Long agent sessions: answers holding the fact")
    figure.tight_layout()
    figure.savefig(path)


def write(
    out: Path,
    rows: Sequence[Row],
    config: BenchConfig,
    model: str,
    seconds: float,
    sessions: Sequence[Session],
) -> str:
    """``results.json``, ``report.md`` and ``accuracy.png`` in ``out``; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = summarize(rows)
    results = {
        "settings": {**asdict(config), "model": model, "seconds": seconds},
        "sessions": [s.to_dict() for s in sessions],
        "summary": [asdict(s) for s in summaries],
        "rows": [asdict(r) for r in rows],
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = report(summaries, config, model, seconds, sessions)
    (out / "report.md").write_text(text)
    plot(summaries, out / "accuracy.png")
    return text


def parse_args(argv: Sequence[str] | None = None) -> tuple[Path, BenchConfig]:
    parser = argparse.ArgumentParser(
        prog="python -m recontext_integrations.langchain.session_bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", default="bench-sessions", help="output folder")
    parser.add_argument("--sessions", type=int, default=BenchConfig.sessions, help="sessions (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument(
        "--max-tokens", type=int, default=BenchConfig.max_tokens, help="answer tokens at most"
    )
    parser.add_argument("--summary-tokens", type=int, default=BenchConfig.summary_tokens)
    parser.add_argument(
        "--keep-messages", type=int, default=BenchConfig.keep_messages, help="summarization keeps"
    )
    parser.add_argument("--max-model-calls", type=int, default=BenchConfig.max_model_calls)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="session sizes times this (0.25: smoke runs)"
    )
    parser.add_argument("--min-messages", type=int, default=BenchConfig.min_messages)
    parser.add_argument("--max-messages", type=int, default=BenchConfig.max_messages)
    parser.add_argument("--min-session-tokens", type=int, default=BenchConfig.min_session_tokens)
    parser.add_argument("--max-session-tokens", type=int, default=BenchConfig.max_session_tokens)
    parser.add_argument("--model", default=None, help="model (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--header", default=None, help="the replay arms' block header (default: the middleware's)"
    )
    args = parser.parse_args(argv)
    config = BenchConfig(
        sessions=args.sessions,
        seed=args.seed,
        arms=tuple(a.strip() for a in args.arms.split(",") if a.strip()),
        max_tokens=args.max_tokens,
        summary_tokens=args.summary_tokens,
        keep_messages=args.keep_messages,
        max_model_calls=args.max_model_calls,
        scale=args.scale,
        min_messages=args.min_messages,
        max_messages=args.max_messages,
        min_session_tokens=args.min_session_tokens,
        max_session_tokens=args.max_session_tokens,
        model=args.model,
        header=args.header,
    )
    return Path(args.out), config


def main(argv: Sequence[str] | None = None, engine: ReContextEngine | None = None) -> int:
    """The command line; ``engine``: a loaded engine to use instead of loading ``--model``."""
    out, config = parse_args(argv)
    started = time.perf_counter()
    if engine is None:
        from recontext_engine import ReContextEngine

        engine = ReContextEngine.from_pretrained(config.model)
    sessions = make_sessions(config.sessions, config.seed, config.session_config(), engine.count_tokens)
    rows = run(engine, config, sessions)
    text = write(out, rows, config, engine.model_name, time.perf_counter() - started, sessions)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
