"""Every fenced ``python`` block of README.md and docs/*.md runs; every command line in them parses.

A page's python blocks run in order in one namespace, as a reader would paste them. A block that
needs what CI lacks (a GPU, hub weights, a hosted model) is preceded by an HTML comment
``<!-- snippet: skip (the reason) -->`` and shows as a skip with that reason. ``GIVEN`` holds the
names the snippets use for the reader's own data. One engine (the embedded model) serves every
snippet; server snippets run against a ``recontext serve`` started on a free port, their
``http://127.0.0.1:8000`` pointed there. Command lines in ``bash`` blocks: ``recontext ...`` and
``python -m recontext_engine ...`` are parsed by the CLI's own parser (``ask`` itself runs in CI as
the README's first command), ``pip install "recontext[...]"`` must name declared extras.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages another part of CI runs; their blocks are skipped here with this reason.
PAGE_SKIPS = {"docs/vllm.md": "needs vLLM: its CPU build runs in its own virtualenv (bash .ci/vllm)"}
SERVER_URL = "http://127.0.0.1:8000"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
SKIP = re.compile(r"<!--\s*snippet:\s*skip\s*\((?P<reason>.+)\)\s*-->")

LEASE = (
    "The lease was signed in March by both parties. The landlord repainted the hall. "
    "Maria lives in the city of Lisbon. Tom lives in the city of Oslo. The rent is due on the first. "
    "Parking is not included. The vault code of the Orion archive is 4172. Pets are allowed."
)
LOG = (
    "The Halcyon left Lisbon on 2 June with a crew of 14. Captain Ada Varga kept the log.\n"
    "The cold-storage hold of the Halcyon was sealed with padlock code 5816.\n"
    "Fog delayed the crossing for two days. She reached Boston on 20 June.\n"
)
GIVEN = {
    "long_text": LEASE,
    "question": "Which city does Maria live in?",
    "doc_a": "Tom lives in the city of Oslo. The harbour opens at dawn.",
    "doc_b": "The vault code of the Orion archive is 4172. Maria lives in the city of Lisbon.",
    "log_text": LOG,
    "document": LOG,
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    skip: str | None


def read_blocks(path: Path) -> list[Block]:
    return parse_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def parse_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of a markdown page (indented ones in lists too), with their skip comments."""
    lines = text.splitlines()
    blocks, i, last_text = [], 0, ""
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            if lines[i].strip():
                last_text = lines[i].strip()
            i += 1
            continue
        indent, fence, start = len(match["indent"]), match["fence"], i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            i += 1
        skip = SKIP.search(last_text)
        blocks.append(Block(page, start + 1, match["lang"], "\n".join(body) + "\n", skip and skip["reason"]))
        last_text, i = "", i + 1
    return blocks


BLOCKS = [block for page in PAGES for block in read_blocks(page)]
PYTHON = [b for b in BLOCKS if b.lang in ("python", "py")]
SHELL = [b for b in BLOCKS if b.lang in ("bash", "sh", "shell", "console")]


def test_the_pages_and_their_blocks_are_found() -> None:
    readme = [b for b in PYTHON if b.page == "README.md"]
    assert len(readme) >= 4 and all(b.skip is None for b in readme), readme
    assert {"docs/langchain.md", "docs/llamaindex.md", "docs/server.md"} <= {b.page for b in PYTHON}
    assert any("recontext ask" in b.code for b in SHELL)
    page = (
        "<!-- snippet: skip (needs a GPU) -->\n\n```python\nx = 1\n```\n\n- item:\n\n  ```bash\n  ls\n  ```\n"
    )
    found = [(b.lang, b.code, b.skip) for b in parse_blocks(page, "probe.md")]
    assert found == [("python", "x = 1\n", "needs a GPU"), ("bash", "ls\n", None)]


@pytest.fixture(scope="module")
def shared_engine(engine):
    """``ReContextEngine.from_pretrained()`` (the embedded model, default settings) returns one engine."""
    from recontext_engine import ReContextEngine

    original = ReContextEngine.from_pretrained.__func__  # type: ignore[attr-defined]
    defaults = {"heads": "auto", "backend": "transformers", "device": None, "progress": False}

    def from_pretrained(cls, model=None, **options):
        options = {k: v for k, v in options.items() if not (k == "device" and v == "cpu")}
        if (
            model is None
            and all(options.get(k, v) == v for k, v in defaults.items())
            and set(options) <= set(defaults)
        ):
            return engine
        return original(cls, model, **options)

    mp = pytest.MonkeyPatch()
    mp.setattr(ReContextEngine, "from_pretrained", classmethod(from_pretrained))
    yield engine
    mp.undo()


@pytest.fixture(scope="module")
def server():
    """``recontext serve`` with the embedded model on a free loopback port, started on first use."""
    pytest.importorskip("fastapi")
    from recontext_engine.serve.process import ServerProcess

    started: list[ServerProcess] = []

    def url() -> str:
        if not started:
            process = ServerProcess(["--log-level", "warning"], cwd=ROOT)
            process.__enter__()
            started.append(process)
        return started[0].root_url

    yield url
    for process in started:
        process.__exit__(None, None, None)


@pytest.fixture
def isolated():
    """What a snippet registers globally (a signal, a scorer, an event handler) is undone after it."""
    from recontext_engine.scoring.base import SCORERS
    from recontext_engine.selection.base import SIGNALS

    registries = [(registry, dict(registry)) for registry in (SIGNALS, SCORERS)]
    dispatcher = None
    try:
        from llama_index.core.instrumentation import get_dispatcher

        dispatcher = get_dispatcher()
        handlers = list(dispatcher.event_handlers)
    except ImportError:
        pass
    yield
    for registry, saved in registries:
        registry.clear()
        registry.update(saved)
    if dispatcher is not None:
        dispatcher.event_handlers[:] = handlers


NAMESPACES: dict[str, dict] = {}


def run_block(code: str, namespace: dict) -> None:
    compiled = compile(code, "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, namespace))
    else:
        exec(compiled, namespace)


@pytest.mark.model
@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.page}:{b.line}" for b in PYTHON])
def test_python_snippet_runs(block: Block, shared_engine, server, isolated, tmp_path, monkeypatch) -> None:
    reason = block.skip or PAGE_SKIPS.get(block.page)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)  # files a snippet writes (view.html) stay out of the checkout
    namespace = NAMESPACES.setdefault(block.page, {"__name__": "__snippet__", **GIVEN})
    code = block.code
    if SERVER_URL in code:
        code = code.replace(SERVER_URL, server())
    try:
        run_block(code, namespace)
    except Exception as error:
        raise AssertionError(f"{block.page}:{block.line} failed:\n{block.code}") from error


def command_lines(block: Block) -> list[list[str]]:
    """The block's commands, split on ``&&`` and without comments."""
    commands = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1 :]
    return commands


def checked(words: list[str]) -> bool:
    return (
        words[:1] == ["recontext"]
        or words[:3] == ["python", "-m", "recontext_engine"]
        or words[:2]
        == [
            "pip",
            "install",
        ]
    )


def unknown_extras(words: list[str]) -> set[str]:
    """Extras a ``pip install`` line asks of this project that pyproject.toml does not declare."""
    import tomllib  # Python 3.11+

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    asked = {
        extra
        for w in words
        for m in re.findall(r"^(?:recontext|\.)\[([\w,-]+)\]$", w)
        for extra in m.split(",")
    }
    return asked - set(declared)


SHELL_COMMANDS = [(b, c) for b in SHELL for c in command_lines(b) if b.page not in PAGE_SKIPS and checked(c)]


@pytest.mark.parametrize(
    "block, words", SHELL_COMMANDS, ids=[f"{b.page}:{b.line}:{' '.join(w[:3])}" for b, w in SHELL_COMMANDS]
)
def test_command_lines_parse(block: Block, words: list[str]) -> None:
    from recontext_engine.cli import build_parser

    if words[0] == "pip":
        assert not unknown_extras(words), f"{block.page}:{block.line}: undeclared extra in {words}"
        return
    argv = words[1:] if words[0] == "recontext" else words[3:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as stop:
        assert stop.code == 0, f"{block.page}:{block.line}: `{' '.join(words)}` does not parse"


def test_the_command_line_checks_fail_on_bad_lines() -> None:
    from recontext_engine.cli import build_parser

    assert unknown_extras(["pip", "install", "recontext[serve,nope]", ".[test]"]) == {"nope"}
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["ask", "--no-such-option"])
    assert stop.value.code == 2


def test_python_m_recontext_engine_lists_the_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "recontext_engine", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for command in ("ask", "heads", "bench", "serve"):
        assert re.search(rf"^\s+{command}\s+\S", done.stdout, re.M), done.stdout
