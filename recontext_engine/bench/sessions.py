"""Long agent sessions, generated and seeded: a fact stated early, a question about it at the end.

:func:`make_sessions` writes what a coding/ops agent's history looks like: the user's requests and
specifications, the agent's tool calls (``list_files``, ``read_file``, ``run_tests``,
``search_logs``, ``query_db``, ``git_log``) and their outputs (file listings, JSON, log lines, test
reports), short replies. One message states the fact a final question asks about:

- ``spec``: the user states a requirement early ("The deploy bucket for production is s3://...");
- ``path``: a file listing an early tool call printed holds the path;
- ``tool_value``: a tool's output holds the value (a JSON field, a log line, a failing test);
- ``superseded``: the user states an old value early and corrects it later; the correction is gold.

Messages are OpenAI-style dicts (assistant tool calls under ``"tool_calls"``, tool results with their
``"tool_call_id"``); the question is not among them. The answer appears in no other message (for
``superseded``, the old value only in the old statement and the correction), so a reply is judged by
whether it holds the answer (:func:`mentions`). Framework-free: the LangChain arms are in
``recontext_integrations.langchain.session_bench``.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..structured import format_tool_call

KINDS = ("spec", "path", "tool_value", "superseded")
TOOL_NAMES = ("list_files", "read_file", "run_tests", "search_logs", "query_db", "git_log")
# Where the fact goes, as shares of the session: facts early, corrections late.
_FACT_SPAN = (0.02, 0.35)
_OLD_SPAN = (0.02, 0.25)
_CORRECTION_SPAN = (0.5, 0.9)
_MAX_LINES = 60  # lines of one tool output at most


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of SmolLM2 tokens (about 2.85 characters a token on this mix of
    prose, JSON, paths and log lines; the benchmark passes the engine's own count)."""
    return math.ceil(len(text) / 2.85) if text else 0


def mentions(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` (case-insensitive) as a whole: not inside a longer word or
    number ("45" is not in "1450", "worker-17" not in "worker-171")."""
    haystack, needle = text.lower(), value.lower()
    if not needle:
        return False
    at = haystack.find(needle)
    while at >= 0:
        end = at + len(needle)
        if not _word_char(haystack, at - 1) and not _word_char(haystack, end):
            return True
        at = haystack.find(needle, at + 1)
    return False


def _word_char(text: str, at: int) -> bool:
    return 0 <= at < len(text) and text[at].isascii() and text[at].isalnum()


def message_text(message: dict[str, Any]) -> str:
    """A message's content and then its tool calls as the model sees them (``format_tool_call``)."""
    calls = [
        format_tool_call(c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls", ())
    ]
    return "\n".join([str(message.get("content") or ""), *calls]).strip()


@dataclass(frozen=True)
class SessionConfig:
    """The sizes of generated sessions.

    A session has between ``min_messages`` and ``max_messages`` messages, and about
    ``min_tokens``..``max_tokens`` tokens (more messages, more tokens); ``scale`` multiplies all four
    (0.25: smoke-test sessions). A message counts its text (tool calls as the model sees them) and
    ``per_message_tokens`` for what a prompt adds around it (the embedded model's agent prompt puts
    a ``[Document N]`` header before each, about 10 tokens), so the largest history still leaves
    room in an 8,192-token window for tool instructions, a replayed block and the answer.
    ``kinds``: the fact kinds, taken in turn.
    """

    min_messages: int = 50
    max_messages: int = 300
    min_tokens: int = 2000
    max_tokens: int = 6000
    scale: float = 1.0
    per_message_tokens: int = 10
    kinds: tuple[str, ...] = KINDS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be among {', '.join(KINDS)}; got {list(self.kinds)}")
        if self.scale <= 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")
        if not 8 <= self.min_messages <= self.max_messages:
            raise ValueError("need 8 <= min_messages <= max_messages")
        if not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError("need 0 < min_tokens <= max_tokens")
        if self.per_message_tokens < 0:
            raise ValueError("per_message_tokens must be >= 0")

    @property
    def message_range(self) -> tuple[int, int]:
        low = max(8, round(self.min_messages * self.scale))
        return low, max(low, round(self.max_messages * self.scale))

    @property
    def token_range(self) -> tuple[int, int]:
        return max(1, round(self.min_tokens * self.scale)), max(1, round(self.max_tokens * self.scale))


@dataclass(frozen=True)
class Session:
    """One generated session.

    ``messages``: the history (OpenAI-style dicts); ``question``: the final user request (not in
    ``messages``); ``answer``: the string a correct reply holds; ``fact_message``: the index of the
    message stating the (current) fact; ``superseded_answer``/``superseded_message``: the old value
    and where it was stated (``superseded`` kind only). ``tokens``: the size of the history as the
    generator counted it (text and ``per_message_tokens`` a message, see :class:`SessionConfig`).
    """

    index: int
    seed: int
    kind: str
    topic: str
    messages: list[dict[str, Any]] = field(hash=False)
    question: str
    answer: str
    fact_message: int
    superseded_answer: str | None = None
    superseded_message: int | None = None
    tokens: int = 0

    def request(self) -> dict[str, str]:
        """The question as the user message that follows the history."""
        return {"role": "user", "content": self.question}

    def prompt_messages(self) -> list[dict[str, Any]]:
        """The history and then the question (copies: the caller may change them)."""
        return [json.loads(json.dumps(m)) for m in self.messages] + [self.request()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "seed": self.seed,
            "kind": self.kind,
            "topic": self.topic,
            "messages": len(self.messages),
            "tokens": self.tokens,
            "question": self.question,
            "answer": self.answer,
            "fact_message": self.fact_message,
            "superseded_answer": self.superseded_answer,
            "superseded_message": self.superseded_message,
        }


# -- vocabulary ---------------------------------------------------------------------------------

_SERVICES = (
    "payments", "billing", "search", "inventory", "notifications", "reports", "gateway",
    "scheduler", "ledger", "catalog", "shipping", "accounts",
)  # fmt: skip
_CODENAMES = (
    "kestrel", "marlin", "osprey", "juniper", "basalt", "cobalt", "heron", "quartz", "willow",
    "falcon", "cedar", "lynx", "sable", "onyx", "tundra", "aspen", "ember", "fjord", "garnet", "ibis",
)  # fmt: skip
_FACT_NAMES = ("Ingrid", "Tomasz", "Okafor", "Priya", "Mateo", "Yuki", "Farida", "Lorcan", "Signe", "Ravi")
_AUTHORS = ("dana", "li.wei", "sam", "noor", "kofi", "ana", "jules", "mika")
_CUSTOMERS = (
    "Northwind Traders", "Globex Retail", "Initech Labs", "Umbrella Foods", "Stark Logistics",
    "Wayne Outdoor", "Acme Garden", "Hooli Media", "Vandelay Imports", "Soylent Kitchens",
)  # fmt: skip
_FILES = (
    "api", "models", "views", "utils", "client", "schema", "tasks", "config", "handlers", "worker",
    "cache", "auth", "serializers", "routes", "events", "metrics",
)  # fmt: skip
_TEST_CASES = (
    "creates_invoice", "handles_empty_cart", "rejects_bad_token", "retries_on_timeout",
    "parses_headers", "paginates_results", "rounds_totals", "caches_lookups", "sends_digest",
    "validates_email", "merges_accounts", "expires_sessions",
)  # fmt: skip
_FAILING_CASES = (
    "refund_rounding", "currency_conversion", "tax_exemption", "partial_capture", "webhook_signature",
    "idempotency_key", "coupon_stacking", "proration_math",
)  # fmt: skip
_LOG_EVENTS = (
    "job finished in {ms}ms", "request served in {ms}ms", "cache hit ratio {pct}%", "queue depth {n}",
    "retrying upstream call (attempt {k})", "flushed {n} events", "connection pool at {pct}%",
    "slow query took {ms}ms", "heartbeat ok", "rotated log file",
)  # fmt: skip
_COMMITS = (
    "fix: handle empty cart", "feat: add export endpoint", "chore: bump dependencies",
    "refactor: split the worker loop", "test: cover the retry path", "docs: update the runbook",
    "fix: close db cursors", "perf: batch the event writes", "feat: paginate the listing",
)  # fmt: skip
_REGIONS = ("eu-west-1", "eu-central-1", "us-east-2", "us-west-2", "ap-south-1", "ap-northeast-1")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_CHAT_USER = (
    "Next, have a look at the {svc} module.",
    "Can you check why the {svc} build is slow?",
    "Thanks. Keep going.",
    "Please also tidy up the imports in {file}.py.",
    "What is left on the {svc} task?",
    "OK, that looks fine to me.",
    "Let's not touch the {svc} tests yet.",
    "Is the {svc} worker still flaky?",
    "Please keep the changes small.",
    "Good. Move on to the next item.",
    "Add a short comment to {file}.py explaining the retry.",
    "How long did that take?",
)
_CHAT_ASSISTANT = (
    "Sure, I will start with {file}.py.",
    "Done. Nothing else stands out in {svc}.",
    "I will run the tests after that.",
    "Understood, I will keep the diff small.",
    "The {svc} module looks consistent now.",
    "Noted.",
    "I renamed two helpers in {file}.py; behaviour is unchanged.",
    "That part is done; moving on.",
    "It was mostly waiting on the network.",
    "I left the {svc} tests as they are.",
)
_ASK_TOOL = {
    "list_files": (
        "Show me what is under {dir}.",
        "List the files in {dir}.",
        "What files do we have in {dir}?",
    ),
    "read_file": ("Open {path} for me.", "What does {path} contain?", "Read {path}, please."),
    "run_tests": ("Run the {svc} tests.", "Can you run the test suite for {svc}?", "Run the tests again."),
    "search_logs": (
        "Check the logs for {query}.",
        "Search the logs for {query}.",
        "Anything about {query} in the logs?",
    ),
    "query_db": (
        "Look up the recent {table} in the database.",
        "Query the {table} table.",
        "Pull the latest {table} rows.",
    ),
    "git_log": ("What changed recently?", "Show me the last few commits.", "Who touched the code last?"),
}
_SUMMARY = {
    "list_files": (
        "That directory has {n} entries.",
        "Nothing unexpected in that listing.",
        "The layout looks standard.",
    ),
    "read_file": (
        "The file looks fine.",
        "I have read it; nothing to change there yet.",
        "That file is short and clear.",
    ),
    "run_tests": ("The suite passes.", "All green.", "The tests pass; no flakes this time."),
    "search_logs": ("The logs look normal.", "Nothing alarming in those lines.", "Mostly routine messages."),
    "query_db": ("Those rows look consistent.", "The data looks as expected.", "Nothing odd in that table."),
    "git_log": (
        "Recent commits are small fixes.",
        "The history looks routine.",
        "Nothing risky landed recently.",
    ),
}
_CALL_TEXT = ("", "", "Let me check.", "I will look at that.", "Checking now.")


class _Draw:
    """A seeded source of filler values that avoids the reserved ones (the fact's values)."""

    def __init__(self, rng: random.Random, reserved: Sequence[str]) -> None:
        self.rng = rng
        self.reserved = [r for r in reserved if r]
        self._seen: dict[str, bool] = {}

    def _free(self, text: str) -> bool:
        """Whether ``text`` neither holds a reserved value nor is part of one (17 of worker-17)."""
        if text not in self._seen:
            self._seen[text] = not any(mentions(text, r) or mentions(r, text) for r in self.reserved)
        return self._seen[text]

    def fresh(self, make: Callable[[], str]) -> str:
        """A text from ``make`` that holds no reserved value (it tries a few)."""
        for _ in range(20):
            text = make()
            if not any(mentions(text, r) for r in self.reserved):
                return text
        return text

    def pick(self, options: Sequence[str]) -> str:
        free = [o for o in options if self._free(o)] or list(options)
        return free[self.rng.randrange(len(free))]

    def num(self, low: int, high: int) -> int:
        for _ in range(50):
            value = self.rng.randint(low, high)
            if self._free(str(value)):
                return value
        return value


# -- facts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fact:
    """A fact: for user-stated kinds ``statement`` (and ``correction``); for tool kinds the tool and
    its call arguments and the line of its output that holds the value."""

    topic: str
    question: str
    answer: str
    statement: str = ""
    old: str | None = None
    correction: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    line: str = ""
    reserved: tuple[str, ...] = ()


def _spec(rng: random.Random) -> _Fact:
    topic = rng.choice(["bucket", "rate_limit", "db_port", "reviewer", "ticket", "flag", "branch", "channel"])
    if topic == "bucket":
        value = f"{rng.choice(_CODENAMES)}-prod-{rng.randint(1000, 9999)}"
        return _Fact(
            topic,
            "Which S3 bucket do production deploys go to?",
            value,
            f"The deploy bucket for production is s3://{value}.",
        )
    if topic == "rate_limit":
        value = str(rng.randrange(130, 990, 10))
        return _Fact(
            topic,
            "What rate limit should the public API have, in requests per minute?",
            value,
            f"Keep the public API rate limit at {value} requests per minute.",
        )
    if topic == "db_port":
        value = str(rng.randint(15000, 19999))
        return _Fact(
            topic,
            "Which port does the staging database listen on?",
            value,
            f"The staging database listens on port {value}.",
        )
    if topic == "reviewer":
        value = rng.choice(_FACT_NAMES)
        return _Fact(
            topic,
            "Who must review changes to the auth module?",
            value,
            f"{value} must review every change to the auth module.",
        )
    if topic == "ticket":
        value = f"{rng.choice(['PAY', 'OPS', 'INFRA', 'CORE'])}-{rng.randint(1000, 9999)}"
        return _Fact(
            topic, "Which ticket tracks this work?", value, f"This work is tracked in ticket {value}."
        )
    if topic == "flag":
        value = f"checkout_{rng.choice(_CODENAMES)}_rollout"
        return _Fact(
            topic,
            "Which feature flag is the new checkout flow behind?",
            value,
            f"The new checkout flow is behind the feature flag {value}.",
        )
    if topic == "branch":
        value = f"release/{rng.randint(2, 9)}.{rng.randint(10, 49)}"
        return _Fact(
            topic,
            "Which branch should the release be cut from?",
            value,
            f"Cut the release from the branch {value}.",
        )
    value = f"ops-{rng.choice(_CODENAMES)}"
    return _Fact(
        topic,
        "Which Slack channel should the on-call pages go to?",
        value,
        f"Send on-call pages to the Slack channel #{value}.",
    )


def _superseded(rng: random.Random) -> _Fact:
    topic = rng.choice(["retention", "upload_limit", "region", "freeze", "owner"])
    if topic == "retention":
        old, new = (str(v) for v in rng.sample([14, 21, 30, 45, 60, 90, 120, 180], 2))
        statement = f"Our log retention policy is {old} days."
        question = "How many days is the log retention policy now?"
        corrections = [
            f"Update: the retention policy changed from {old} to {new} days.",
            f"Correction on retention: it is now {new} days, not {old}.",
            f"Heads-up, legal changed the log retention to {new} days (it used to be {old}).",
        ]
    elif topic == "upload_limit":
        old, new = (str(v) for v in rng.sample([25, 50, 75, 100, 200, 250, 500], 2))
        statement = f"The maximum upload size is {old} MB."
        question = "What is the maximum upload size now, in MB?"
        corrections = [
            f"Update: the maximum upload size changed from {old} to {new} MB.",
            f"Correction: uploads may now be up to {new} MB, not {old}.",
            f"Product raised the upload limit to {new} MB (it was {old}).",
        ]
    elif topic == "region":
        old, new = rng.sample(_REGIONS, 2)
        statement = f"We deploy the new cluster to {old}."
        question = "Which region should the new cluster be deployed to?"
        corrections = [
            f"Update: the new cluster moves from {old} to {new}.",
            f"Correction: deploy the new cluster to {new}, not {old}.",
            f"Change of plan, the cluster goes to {new} instead of {old}.",
        ]
    elif topic == "freeze":
        old, new = rng.sample(_DAYS, 2)
        statement = f"The code freeze is on {old}."
        question = "On which day is the code freeze now?"
        corrections = [
            f"Update: the code freeze moved from {old} to {new}.",
            f"Correction: the freeze is on {new}, not {old}.",
            f"Change of plan, we freeze on {new} instead of {old}.",
        ]
    else:
        old, new = rng.sample(_FACT_NAMES, 2)
        statement = f"{old} owns the billing migration."
        question = "Who owns the billing migration now?"
        corrections = [
            f"Update: the billing migration moved from {old} to {new}.",
            f"Correction: {new} owns the billing migration now, not {old}.",
            f"{new} is taking over the billing migration from {old}.",
        ]
    return _Fact(topic, question, new, statement, old=old, correction=rng.choice(corrections))


def _path(rng: random.Random) -> _Fact:
    topic = rng.choice(["refund_handler", "migration", "secrets", "cdn_module"])
    code = rng.choice(_CODENAMES)
    if topic == "refund_handler":
        return _Fact(
            topic,
            "Which service directory contains refund_handler.py?",
            code,
            tool="list_files",
            arguments={"path": "services"},
            line=f"services/{code}/handlers/refund_handler.py",
        )
    if topic == "migration":
        value = f"{rng.randint(100, 999):04d}"
        return _Fact(
            topic,
            "What number does the migration that adds the refund index have?",
            value,
            tool="list_files",
            arguments={"path": "db/migrations"},
            line=f"db/migrations/{value}_add_refund_index.sql",
        )
    if topic == "secrets":
        return _Fact(
            topic,
            "What is the encrypted secrets file under config/secrets called?",
            f"{code}.enc.json",
            tool="list_files",
            arguments={"path": "config"},
            line=f"config/secrets/{code}.enc.json",
            reserved=(code,),
        )
    return _Fact(
        topic,
        "What is the directory of the CDN Terraform module called?",
        f"cdn_{code}",
        tool="list_files",
        arguments={"path": "infra/terraform"},
        line=f"infra/terraform/modules/cdn_{code}/main.tf",
        reserved=(code,),
    )


def _tool_value(rng: random.Random) -> _Fact:
    topic = rng.choice(["customer_id", "oom_worker", "service_port", "failing_test"])
    if topic == "customer_id":
        customer, value = rng.choice(_CUSTOMERS), str(rng.randint(10000, 99999))
        return _Fact(
            topic,
            f"What is the customer id of {customer}?",
            value,
            tool="query_db",
            arguments={"sql": "SELECT id, name, plan, created FROM customers ORDER BY created DESC LIMIT 20"},
            line=json.dumps(
                {"id": int(value), "name": customer, "plan": "enterprise", "created": "2024-03-02"}
            ),
            reserved=(customer,),
        )
    if topic == "oom_worker":
        value = f"worker-{rng.randint(10, 99)}"
        return _Fact(
            topic,
            "Which worker was killed for running out of memory?",
            value,
            tool="search_logs",
            arguments={"query": "worker restarts"},
            line=f"2024-05-03T04:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z ERROR {value} killed: "
            "out of memory",
        )
    if topic == "service_port":
        service, value = rng.choice(_SERVICES), str(rng.randint(20000, 29999))
        return _Fact(
            topic,
            f"Which port does the {service} service listen on, according to its config file?",
            value,
            tool="read_file",
            arguments={"path": f"config/{service}.json"},
            line=f'"port": {value}',
            reserved=(service,),
        )
    case = rng.choice(_FAILING_CASES)
    value = f"test_{case}"
    return _Fact(
        topic,
        "Which test function failed in the test run?",
        value,
        tool="run_tests",
        arguments={"target": "tests/checkout"},
        line=f"tests/checkout/test_totals.py::{value} FAILED - AssertionError: totals differ by 0.01",
    )


_FACTS: dict[str, Callable[[random.Random], _Fact]] = {
    "spec": _spec,
    "path": _path,
    "tool_value": _tool_value,
    "superseded": _superseded,
}

# -- tool outputs -------------------------------------------------------------------------------


def _listing(draw: _Draw, directory: str, lines: int) -> list[str]:
    rows = []
    for _ in range(lines):
        if directory == "services":
            name = f"services/{draw.pick(_SERVICES)}/{draw.pick(_FILES)}.py"
        elif directory == "db/migrations":
            name = f"db/migrations/{draw.num(1, 999):04d}_{draw.pick(_FILES)}_{draw.pick(_SERVICES)}.sql"
        elif directory == "infra/terraform":
            part = draw.pick(["main", "variables", "outputs"])
            name = f"infra/terraform/modules/{draw.pick(_SERVICES)}/{part}.tf"
        elif directory == "config":
            name = f"config/{draw.pick(_SERVICES)}.{draw.pick(['json', 'yaml'])}"
        else:
            name = f"{directory}/{draw.pick(_FILES)}.py"
        rows.append(name)
    return rows


def _with_sizes(rows: Sequence[str], draw: _Draw) -> str:
    return "\n".join(f"{draw.num(120, 48000):>6}  {row}" for row in rows)


def _config_json(draw: _Draw, service: str, lines: int, port_line: str | None = None) -> str:
    fields = {
        "service": service,
        "port": draw.num(3000, 9999),
        "replicas": draw.num(2, 12),
        "log_level": draw.pick(["info", "warn", "debug"]),
    }
    extra = ["timeout_ms", "max_connections", "batch_size", "cache_ttl_s", "retry_limit", "queue_size"]
    for name in extra[: max(0, min(len(extra), lines - 4))]:
        fields[name] = draw.num(5, 5000)
    text = json.dumps(fields, indent=1)
    if port_line is not None:
        text = re.sub(r'"port": \d+', port_line, text)
    return text


def _log_line(draw: _Draw) -> str:
    event = draw.pick(_LOG_EVENTS).format(
        ms=draw.num(3, 2400), pct=draw.num(40, 99), n=draw.num(2, 900), k=draw.num(2, 5)
    )
    stamp = f"2024-05-03T{draw.num(10, 23)}:{draw.num(10, 59)}:{draw.num(10, 59)}Z"
    level = draw.pick(["INFO", "INFO", "INFO", "WARN"])
    return f"{stamp} {level} {draw.pick(_SERVICES)}-{draw.num(1, 9)} {event}"


def _db_row(draw: _Draw, table: str) -> str:
    if table == "customers":
        return json.dumps(
            {
                "id": draw.num(10000, 99999),
                "name": draw.pick(_CUSTOMERS),
                "plan": draw.pick(["free", "team", "business"]),
                "created": f"2024-0{draw.num(1, 9)}-{draw.num(10, 28)}",
            }
        )
    return json.dumps(
        {
            "id": draw.num(100000, 999999),
            "status": draw.pick(["paid", "pending", "refunded", "failed"]),
            "amount": float(draw.fresh(lambda: f"{draw.rng.randint(100, 99999) / 100:.2f}")),
            "currency": draw.pick(["EUR", "USD", "GBP"]),
        }
    )


def _tool_output(tool: str, arguments: dict[str, Any], lines: int, draw: _Draw, fact: _Fact | None) -> str:
    """The output of one call; ``fact``: its line goes in at a random place (the fact's own call)."""
    at = draw.rng.randint(0, lines)
    if tool == "list_files":
        rows = _listing(draw, arguments["path"], lines)
        if fact is not None:
            rows.insert(at, fact.line)
        return _with_sizes(rows, draw)
    if tool == "read_file":
        path = arguments["path"]
        if path.endswith(".json"):
            service = path.rsplit("/", 1)[-1].removesuffix(".json")
            return _config_json(draw, service, lines, fact.line if fact is not None else None)
        body = [f"def {draw.pick(_TEST_CASES)}(request):" if i % 3 == 0 else "    ..." for i in range(lines)]
        return "\n".join([f"# {path}", "import logging", *body])
    if tool == "run_tests":
        cases = [
            f"tests/test_{draw.pick(_FILES)}.py::test_{draw.pick(_TEST_CASES)} PASSED" for _ in range(lines)
        ]
        if fact is not None:
            cases.insert(at, fact.line)
        passed = len(cases) - (fact is not None)
        failed = " 1 failed," if fact is not None else ""
        return "\n".join([*cases, f"=={failed} {passed} passed in {draw.num(2, 90)}.{draw.num(1, 9)}s =="])
    if tool == "search_logs":
        rows = [_log_line(draw) for _ in range(lines)]
        if fact is not None:
            rows.insert(at, fact.line)
        return "\n".join(rows)
    if tool == "query_db":
        table = "customers" if "customers" in arguments["sql"] else "orders"
        rows = [_db_row(draw, table) for _ in range(lines)]
        if fact is not None:
            rows.insert(at, fact.line)
        return "[\n" + ",\n".join(rows) + "\n]"
    commits = [
        f"{draw.rng.getrandbits(28):07x} {draw.pick(_COMMITS)} ({draw.pick(_AUTHORS)})" for _ in range(lines)
    ]
    return "\n".join(commits)


def _arguments(tool: str, draw: _Draw) -> dict[str, Any]:
    if tool == "list_files":
        return {"path": f"src/{draw.pick(_SERVICES)}"}
    if tool == "read_file":
        if draw.rng.random() < 0.5:
            return {"path": f"config/{draw.pick(_SERVICES)}.json"}
        return {"path": f"src/{draw.pick(_SERVICES)}/{draw.pick(_FILES)}.py"}
    if tool == "run_tests":
        return {"target": f"tests/{draw.pick(_SERVICES)}"}
    if tool == "search_logs":
        return {"query": draw.pick(["timeouts", "slow queries", "retries", "cache misses", "queue depth"])}
    if tool == "query_db":
        table = draw.pick(["orders", "customers"])
        return {"sql": f"SELECT * FROM {table} ORDER BY id DESC LIMIT {draw.num(5, 50)}"}
    return {"limit": draw.num(5, 20)}


def _ask(tool: str, arguments: dict[str, Any], draw: _Draw) -> str:
    value = str(next(iter(arguments.values()), "")).rstrip("/")
    table = "customers" if "customers" in str(value) else "orders"
    return draw.pick(_ASK_TOOL[tool]).format(
        dir=value, path=value, svc=value.rsplit("/", 1)[-1], query=value, table=table
    )


# -- sessions -----------------------------------------------------------------------------------

# Episodes: the slots they fill. "user"/"assistant": a plain turn; "call"/"tool": a tool call and its
# result; "summary": the assistant's reply after tool results.
_EPISODES: dict[str, tuple[str, ...]] = {
    "chat": ("user", "assistant"),
    "ack": ("ack_user", "ack_assistant"),
    "auto": ("call", "tool", "summary"),
    "task": ("user", "call", "tool", "summary"),
    "double": ("call", "tool", "call", "tool", "summary"),
}
_TOOL_EPISODES = {"auto": 0.25, "task": 0.3, "double": 0.1}
_ACK_USER = ("OK.", "Go on.", "Thanks.", "Yes.", "Continue.", "Sounds good.", "Fine.")
_ACK_ASSISTANT = ("Done.", "OK.", "On it.", "Will do.", "Sure.")
_CLOSE = {2: ["chat"], 3: ["auto"], 4: ["task"], 5: ["double"], 6: ["task", "chat"], 7: ["task", "auto"]}


def _skeleton(rng: random.Random, count: int, density: float) -> list[str]:
    """Slot types for ``count`` messages: a user turn first, whole episodes, an assistant turn last.
    ``density``: tokens a message; the sparser the session, the more plain turns (tool calls cost more)."""
    slots = ["user", "assistant"]
    left = count - 2
    # from 35 tokens a message down to 18: acknowledgements 0 -> 60%, tool episodes 65% -> 15%
    sparse = min(1.0, max(0.0, (35 - density) / 17))
    ack, tools = 0.6 * sparse, 0.65 - 0.5 * sparse
    names = ["chat", "ack", *_TOOL_EPISODES]
    total = sum(_TOOL_EPISODES.values())
    weights = [1 - ack - tools, ack, *(tools * w / total for w in _TOOL_EPISODES.values())]
    while left > 7:
        name = rng.choices(names, weights)[0]
        if left - len(_EPISODES[name]) >= 2:
            slots += _EPISODES[name]
            left -= len(_EPISODES[name])
    for name in _CLOSE.get(left, []):
        slots += _EPISODES[name]
    return slots


def _place(rng: random.Random, candidates: Sequence[int], count: int, span: tuple[float, float]) -> int:
    """A candidate slot inside ``span`` (shares of ``count``), else the one nearest to it."""
    low, high = span[0] * count, span[1] * count
    inside = [i for i in candidates if low <= i <= high]
    if inside:
        return rng.choice(inside)
    return min(candidates, key=lambda i: min(abs(i - low), abs(i - high)))


@dataclass
class _Plan:
    """A session before its text: slot types, which tool each call uses, where the facts go."""

    slots: list[str]
    tools: dict[int, str]  # call slot -> tool
    fact_at: int
    old_at: int | None = None


def _plan(rng: random.Random, count: int, density: float, fact: _Fact, kind: str) -> _Plan:
    slots = _skeleton(rng, count, density)
    calls = [i for i, s in enumerate(slots) if s == "call"]
    tools = {i: rng.choice(TOOL_NAMES) for i in calls}
    users = [i for i, s in enumerate(slots) if s == "user"]
    if kind == "superseded":
        old_at = _place(rng, users, count, _OLD_SPAN)
        later = [i for i in users if i > old_at + 4] or [i for i in users if i > old_at] or [old_at]
        return _Plan(slots, tools, _place(rng, later, count, _CORRECTION_SPAN), old_at)
    if fact.tool is None:
        return _Plan(slots, tools, _place(rng, users, count, _FACT_SPAN))
    call = _place(rng, calls, count, _FACT_SPAN)
    tools[call] = fact.tool
    return _Plan(slots, tools, call + 1)  # the result follows its call


def _render(plan: _Plan, fact: _Fact, lines: dict[int, int], seed: int) -> list[dict[str, Any]]:
    """The messages of ``plan`` with tool outputs of ``lines`` lines (the same ``seed``, the same
    text: only the lengths change between calls)."""
    rng = random.Random(seed)
    draw = _Draw(rng, [fact.answer, *([fact.old] if fact.old else []), *fact.reserved])
    messages: list[dict[str, Any]] = []
    pending: dict[str, Any] = {}
    last_tool = "list_files"
    for i, slot in enumerate(plan.slots):
        fill = {"svc": draw.pick(_SERVICES), "file": draw.pick(_FILES)}
        if slot == "user":
            upcoming = plan.tools.get(i + 1)
            if i == plan.fact_at and fact.tool is None:
                text = fact.correction if fact.old is not None else fact.statement
                if i == 0:
                    text = f"We are cleaning up the {fill['svc']} service today. {text}"
            elif i == plan.old_at:
                text = (
                    fact.statement
                    if i
                    else f"We are cleaning up the {fill['svc']} service today. {fact.statement}"
                )
            elif i == 0:
                text = f"We are cleaning up the {fill['svc']} service today. Start with an overview."
            elif upcoming is not None:
                pending = fact.arguments if i + 2 == plan.fact_at else _arguments(upcoming, draw)
                text = _ask(upcoming, pending, draw)
            else:
                text = draw.pick(_CHAT_USER).format(**fill)
            messages.append({"role": "user", "content": text})
        elif slot.startswith("ack_"):
            text = draw.pick(_ACK_USER if slot == "ack_user" else _ACK_ASSISTANT)
            messages.append({"role": slot.removeprefix("ack_"), "content": text})
        elif slot == "assistant":
            if i - 1 in (plan.fact_at, plan.old_at):
                text = "Noted, I will keep that in mind."
            else:
                text = draw.pick(_CHAT_ASSISTANT).format(**fill)
            messages.append({"role": "assistant", "content": text})
        elif slot == "call":
            tool = last_tool = plan.tools[i]
            if i + 1 == plan.fact_at:
                pending = fact.arguments
            elif not (i > 0 and plan.slots[i - 1] == "user" and pending):
                pending = _arguments(tool, draw)
            call = {
                "id": f"call_{rng.getrandbits(40):010x}",
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(pending)},
            }
            messages.append({"role": "assistant", "content": draw.pick(_CALL_TEXT), "tool_calls": [call]})
        elif slot == "tool":
            call = messages[-1]["tool_calls"][0]
            arguments = json.loads(call["function"]["arguments"])
            own = fact if i == plan.fact_at else None
            text = _tool_output(call["function"]["name"], arguments, lines.get(i, 1), draw, own)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
            pending = {}
        else:
            text = draw.pick(_SUMMARY[last_tool]).format(n=draw.num(4, 40))
            messages.append({"role": "assistant", "content": text})
    return messages


def _sized(
    plan: _Plan, fact: _Fact, seed: int, target: int, count_tokens: Callable[[str], int], per_message: int
) -> tuple[list[dict[str, Any]], int]:
    """The messages with tool outputs sized so the history comes near ``target`` tokens: each output
    gets ``weight * scale`` lines (weights vary, so some outputs are long and most are short); the
    scale is found by bisection."""
    rng = random.Random(seed ^ 0x5EED)
    weights = {i: rng.lognormvariate(0.0, 0.6) for i, s in enumerate(plan.slots) if s == "tool"}
    if plan.fact_at in weights:
        weights[plan.fact_at] = max(weights[plan.fact_at], 1.0)

    def build(scale: float) -> tuple[list[dict[str, Any]], int]:
        lines = {i: max(1, min(_MAX_LINES, round(w * scale))) for i, w in weights.items()}
        messages = _render(plan, fact, lines, seed)
        return messages, sum(count_tokens(message_text(m)) + per_message for m in messages)

    low, high = 0.0, float(_MAX_LINES)
    best = build(1.0)
    for _ in range(14):
        middle = (low + high) / 2
        messages, tokens = build(middle)
        if abs(tokens - target) < abs(best[1] - target):
            best = (messages, tokens)
        if tokens < target:
            low = middle
        else:
            high = middle
    return best


def _valid(messages: Sequence[dict[str, Any]], fact: _Fact, plan: _Plan) -> bool:
    """The answer in the fact's message and nowhere else; the old value only where it was stated."""
    if plan.old_at is not None and plan.old_at >= plan.fact_at:
        return False
    for i, message in enumerate(messages):
        text = message_text(message)
        if mentions(text, fact.answer) != (i == plan.fact_at):
            return False
        if fact.old is not None and mentions(text, fact.old) and i not in (plan.old_at, plan.fact_at):
            return False
    return fact.old is None or (
        plan.old_at is not None and mentions(message_text(messages[plan.old_at]), fact.old)
    )


def make_session(
    index: int,
    seed: int,
    config: SessionConfig | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Session:
    """Session ``index`` of the seeded set (the same ``index``/``seed``/``config``, the same session)."""
    config = config or SessionConfig()
    count_tokens = count_tokens or estimate_tokens
    kind = config.kinds[index % len(config.kinds)]
    (min_messages, max_messages), (min_tokens, max_tokens) = config.message_range, config.token_range
    for attempt in range(20):
        rng = random.Random(f"recontext-sessions:{seed}:{index}:{attempt}")
        count = rng.randint(min_messages, max_messages)
        share = (count - min_messages) / max(1, max_messages - min_messages)
        target = (min_tokens + share * (max_tokens - min_tokens)) * rng.uniform(0.9, 1.1)
        target = min(max(target, min_tokens), max_tokens)
        fact = _FACTS[kind](rng)
        plan = _plan(rng, count, target / count, fact, kind)
        messages, tokens = _sized(
            plan, fact, rng.getrandbits(32), round(target), count_tokens, config.per_message_tokens
        )
        if _valid(messages, fact, plan):
            return Session(
                index=index,
                seed=seed,
                kind=kind,
                topic=fact.topic,
                messages=messages,
                question=fact.question,
                answer=fact.answer,
                fact_message=plan.fact_at,
                superseded_answer=fact.old,
                superseded_message=plan.old_at,
                tokens=tokens,
            )
    raise RuntimeError(f"could not generate session {index} (seed {seed}) with a unique answer")


def make_sessions(
    count: int,
    seed: int = 0,
    config: SessionConfig | None = None,
    count_tokens: Callable[[str], int] | None = None,
    **sizes: Any,
) -> list[Session]:
    """``count`` sessions, the fact kinds in turn. ``config`` (or its fields as keyword arguments,
    e.g. ``scale=0.25``) sets their sizes; ``count_tokens`` measures them (default
    :func:`estimate_tokens`; pass the engine's ``count_tokens`` for exact sizes)."""
    config = replace(config or SessionConfig(), **sizes)
    return [make_session(i, seed, config, count_tokens) for i in range(count)]
