"""Settings the integrations used to drop silently (issue #28, item 6), copies, logging, and
adversarial input at every entry point.

Construction tests load no model (a stub stands in where an ``engine=`` is needed); tests marked
``model`` use the embedded engine.
"""

from __future__ import annotations

import copy
import inspect
import logging
import pickle
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, get_args

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.rate_limiters import InMemoryRateLimiter  # noqa: E402
from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

from recontext_integrations.langchain import (  # noqa: E402
    ChatReContext,
    ReContextCompressor,
    ReContextReplayer,
)
from recontext_integrations.llama_index import ReContextEvidencePostprocessor, ReContextLLM  # noqa: E402

ALL_CLASSES = [
    ChatReContext,
    ReContextCompressor,
    ReContextReplayer,
    ReContextLLM,
    ReContextEvidencePostprocessor,
]
CONTEXT = "Ada lives in Lisbon. Bruno lives in Oslo. Chloe lives in Nairobi."
QUESTION = "Where does Bruno live?"


class StubEngine:
    """Stands in for a loaded engine in construction tests; it refuses to be copied or pickled."""

    model_name = "stub-model"
    context_window = 8192

    def __deepcopy__(self, memo: dict[int, Any]) -> StubEngine:
        raise AssertionError("an engine must be shared, never copied")

    def __reduce__(self) -> Any:
        raise AssertionError("an engine must never be pickled")


# -- unknown and misspelled arguments (no model) ----------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (ChatReContext, {"max_token": 8}, "did you mean 'max_tokens'"),
        (ChatReContext, {"temprature": 0.5}, "did you mean 'temperature'"),
        (ReContextCompressor, {"mod": "extract"}, "did you mean 'mode'"),
        (ReContextReplayer, {"top_kk": 2}, "did you mean 'top_k'"),
        (ReContextLLM, {"max_token": 8}, "did you mean 'max_tokens'"),
        (ReContextEvidencePostprocessor, {"top_m": 2}, "did you mean 'top_n'"),
        (ReContextEvidencePostprocessor, {"bogus": 1}, "unknown argument 'bogus'"),
    ],
)
def test_unknown_argument_is_refused_naming_the_closest(
    cls: type, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [ReContextLLM, ReContextEvidencePostprocessor, ChatReContext])
def test_replay_option_as_argument_points_at_replay_options(cls: type) -> None:
    with pytest.raises(ValueError, match=r"ReplayConfig option: pass replay_options=\{'max_evidence'"):
        cls(max_evidence=4)


@pytest.mark.parametrize("cls", ALL_CLASSES)
@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("timeout", 30, "no request timeout"),
        ("max_retries", 2, "nothing to retry"),
        ("model_kwargs", {"top_k": 1}, "replay_options"),
    ],
)
def test_hosted_client_arguments_are_refused_with_the_reason(
    cls: type, name: str, value: Any, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        cls(**{name: value})


def test_framework_fields_keep_working() -> None:
    model = ChatReContext(
        callbacks=[],
        tags=["t"],
        metadata={"k": 1},
        cache=False,
        verbose=False,
        rate_limiter=InMemoryRateLimiter(),
        disable_streaming=True,
        output_version="v1",
        name="mine",
        streaming=True,
    )
    assert (model.tags, model.name, model.disable_streaming) == (["t"], "mine", True)
    llm = ReContextLLM(callback_manager=CallbackManager([]), system_prompt="Be brief.")
    assert llm.system_prompt == "Be brief."
    ReContextEvidencePostprocessor(callback_manager=CallbackManager([]))
    ReContextCompressor(mode="rerank", top_n=2)
    ReContextReplayer(rounds=1, top_k=2)


# -- OpenAI names, context_window, replay_options (no model) -----------------------------------


def test_openai_names_map_to_the_settings() -> None:
    assert ChatReContext(model_name="my/model").model == "my/model"
    assert ChatReContext(model_name="my/model").model_name == "my/model"
    assert ReContextLLM(max_new_tokens=8).to_dict()["max_tokens"] == 8


# -- one vocabulary in both integrations (no model) ---------------------------------------------


class Captured(Exception):
    """Raised by ``RecordingEngine`` with the options a call would generate with."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.options = options


class RecordingConfig:
    """Stands in for ``engine.default_config``: records what ``with_options`` sets."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}

    def with_options(self, **options: Any) -> RecordingConfig:
        self.options.update(options)
        return self


class RecordingEngine(StubEngine):
    """A stub engine whose plain chat stops the call and hands back the generation options."""

    def __init__(self) -> None:
        self.default_config = RecordingConfig()

    def stream_chat(self, messages: Any, config: Any = None, **options: Any) -> Any:
        raise Captured(config.options if config is not None else options)


@pytest.mark.parametrize("name", ["max_tokens", "max_new_tokens"])
@pytest.mark.parametrize("cls", [ChatReContext, ReContextLLM])
def test_both_chat_models_take_max_tokens_and_the_engine_name(cls: type, name: str) -> None:
    assert "max_tokens" in cls.model_fields and "max_new_tokens" not in cls.model_fields
    assert cls(**{name: 8}).max_tokens == 8


@pytest.mark.parametrize("name", ["max_tokens", "max_new_tokens"])
def test_both_chat_models_take_either_name_per_call(name: str) -> None:
    with pytest.raises(Captured) as chat_call:
        ChatReContext(engine=RecordingEngine()).invoke("Hello", **{name: 5})
    with pytest.raises(Captured) as llm_call:
        ReContextLLM(engine=RecordingEngine()).complete("Hello", **{name: 5})
    assert chat_call.value.options["max_new_tokens"] == llm_call.value.options["max_new_tokens"] == 5
    with pytest.raises(ValueError, match="are the same setting"):
        ChatReContext(engine=RecordingEngine()).invoke("Hello", max_tokens=5, max_new_tokens=6)
    with pytest.raises(ValueError, match="are the same setting"):
        ReContextLLM(engine=RecordingEngine()).complete("Hello", max_tokens=5, max_new_tokens=6)


@pytest.mark.parametrize("cls", [ReContextCompressor, ReContextEvidencePostprocessor])
def test_rerank_is_chosen_the_same_way_in_both_integrations(cls: type) -> None:
    assert get_args(cls.model_fields["mode"].annotation) == ("append", "extract", "rerank")
    assert cls.model_fields["mode"].default == "append" and cls.model_fields["top_n"].default is None
    assert cls(mode="rerank", top_n=2).top_n == 2
    assert cls(mode="rerank").top_n is None  # all documents, reordered
    with pytest.raises(ValueError, match="top_n= applies to mode='rerank' only"):
        cls(mode="extract", top_n=2)
    with pytest.raises(ValueError, match="did you mean 'mode'"):
        cls(mod="rerank")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rerank": True, "top_n": 2}, "rerank= was replaced: write mode='rerank'"),
        ({"add_evidence": False}, "add_evidence= was replaced: mode='rerank' selects no evidence"),
    ],
)
def test_earlier_postprocessor_rerank_settings_say_what_replaced_them(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ReContextEvidencePostprocessor(**kwargs)


def test_the_adapters_use_the_engine_question_markers() -> None:
    from recontext_engine.messages import DEFAULT_QUESTION_MARKER, split_prompt
    from recontext_integrations.llama_index.llm import QUESTION_MARKERS

    assert ChatReContext().question_marker == DEFAULT_QUESTION_MARKER
    assert inspect.signature(split_prompt).parameters["question_marker"].default == QUESTION_MARKERS


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (ChatReContext, {"model": "a", "model_name": "b"}),
        (ChatReContext, {"max_tokens": 8, "max_new_tokens": 9}),
        (ReContextLLM, {"max_tokens": 8, "max_new_tokens": 9}),
    ],
)
def test_both_names_of_one_setting_are_refused(cls: type, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="are the same setting"):
        cls(**kwargs)


def test_context_window_caps_the_reported_window() -> None:
    engine = StubEngine()
    assert ReContextLLM(engine=engine, context_window=2048).metadata.context_window == 2048
    assert ReContextLLM(engine=engine, context_window=10**6).metadata.context_window == 8192
    assert ReContextLLM(engine=engine).metadata.context_window == 8192
    with pytest.raises(ValueError):
        ReContextLLM(context_window=0)


def test_langchain_replay_options_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown ReplayConfig option"):
        ChatReContext(replay_options={"top_kk": 1})
    # the max_tokens field (256 by default) would override it
    with pytest.raises(ValueError, match=r"set max_tokens= instead"):
        ChatReContext(replay_options={"max_new_tokens": 8})
    with pytest.raises(ValueError, match=r"set top_k= instead"):
        ReContextCompressor(top_k=2, replay_options={"top_k": 4})
    assert ReContextCompressor(replay_options={"top_k": 4}).replay_options == {"top_k": 4}
    assert ChatReContext(max_tokens=None, replay_options={"max_new_tokens": 8}).max_tokens is None


# -- tools and structured output (no model) ------------------------------------------------------


def test_tools_and_structured_output_bind_their_settings() -> None:
    model = ChatReContext()
    bound = model.bind_tools(
        [{"name": "noop", "parameters": {"type": "object", "properties": {}}}], tool_choice="any"
    )
    assert bound.kwargs["tool_choice"] == "required"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="noop"):
        model.bind_tools([{"name": "noop"}], tool_choice="other")
    schema = {"title": "Answer", "type": "object", "properties": {"text": {"type": "string"}}}
    assert model.with_structured_output(schema) is not None


# -- copies and pickles (no model) ------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_copy_and_pickle_without_engine(cls: type, caplog: pytest.LogCaptureFixture) -> None:
    component = cls(model="some/model", device="cpu")
    with caplog.at_level(logging.WARNING):
        for twin in (copy.deepcopy(component), pickle.loads(pickle.dumps(component))):
            assert type(twin) is cls
            assert (twin.model, twin.device) == ("some/model", "cpu")
    # LlamaIndex drops what it cannot pickle, with a warning: nothing is dropped
    assert not [r for r in caplog.records if "unpickleable" in r.getMessage()]


@pytest.mark.parametrize("cls", [ChatReContext, ReContextLLM])
def test_copied_model_warns_on_its_own_lock(cls: type, caplog: pytest.LogCaptureFixture) -> None:
    model = cls()
    twin = copy.deepcopy(model)
    assert twin._notice._lock is not model._notice._lock
    with caplog.at_level(logging.WARNING, logger="recontext_integrations"):
        twin._notice(cls.__name__, SimpleNamespace(rule="none"))
    assert "plain chat" in caplog.text


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_copy_shares_the_engine_and_pickle_refuses_it(cls: type) -> None:
    engine = StubEngine()
    component = cls(engine=engine)
    assert copy.deepcopy(component).engine is engine
    assert component.model_copy(deep=True).engine is engine
    with pytest.raises(TypeError, match=r"built with engine= cannot be pickled.*model="):
        pickle.dumps(component)


# -- logging (embedded model) ------------------------------------------------------------------------


QUIET_LOGGERS = {"recontext", "recontext_engine", "recontext_integrations", "bm25s"}


@pytest.fixture
def info_records() -> Iterator[list[logging.LogRecord]]:
    """What an application that ran ``logging.basicConfig(level=logging.INFO)`` would print."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    root, handler = logging.getLogger(), Collect()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.mark.model
def test_calls_log_no_debug_or_info(engine: Any, info_records: list[logging.LogRecord]) -> None:
    ChatReContext(engine=engine, max_tokens=2).invoke(f"{CONTEXT}\nQuestion: {QUESTION}")
    ReContextLLM(engine=engine, max_tokens=2).complete(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}")
    chatty = [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in info_records
        if r.levelno < logging.WARNING and r.name.split(".")[0] in QUIET_LOGGERS
    ]
    assert chatty == []


# -- per-call settings (embedded model) ----------------------------------------------------------------


@pytest.mark.model
def test_llm_call_takes_max_tokens(engine: Any) -> None:
    llm = ReContextLLM(engine=engine, max_tokens=32, replay_options={"rounds": 1, "top_k": 2})
    response = llm.complete(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION} Answer at length.", max_tokens=2)
    assert response.raw["usage"]["output_tokens"] <= 2


@pytest.mark.model
def test_chat_call_takes_replay_options(engine: Any) -> None:
    model = ChatReContext(engine=engine, max_tokens=2)
    message = model.invoke(f"{CONTEXT}\nQuestion: {QUESTION}", replay_options={"max_evidence": 1})
    assert len(message.response_metadata["evidence"]) <= 1


# -- adversarial marker text at every entry point (embedded model) --------------------------------


DEADLINE_S = 10
# Template markers repeated to ~100 KB: the text each split rule searches, with nothing between.
MARKER_TEXTS = {
    "refine": "New Context:\n---\nQuery:\nOriginal Answer:\n",
    "text_qa": "Context information is below.\n---\nQuestion:\n----------\n",
}


def _adversarial(kind: str) -> str:
    line = MARKER_TEXTS[kind]
    return line * (100_000 // len(line) + 1)


def _answers_or_refuses(call: Callable[[], Any]) -> None:
    """``call`` returns, or raises a ValueError (ReContextError: e.g. over the model window), in time.

    The call runs in a daemon thread: one that hangs fails the test without blocking the run's exit.
    """
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:  # handed to the test
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    try:
        future.result(timeout=DEADLINE_S)
    except ValueError as error:
        assert str(error)


@pytest.mark.model
@pytest.mark.parametrize("kind", sorted(MARKER_TEXTS))
def test_chat_invoke_on_marker_text(engine: Any, kind: str) -> None:
    _answers_or_refuses(lambda: ChatReContext(engine=engine, max_tokens=2).invoke(_adversarial(kind)))


@pytest.mark.model
@pytest.mark.parametrize("kind", sorted(MARKER_TEXTS))
def test_llm_complete_on_marker_text(engine: Any, kind: str) -> None:
    _answers_or_refuses(lambda: ReContextLLM(engine=engine, max_tokens=2).complete(_adversarial(kind)))


def _chunks(text: str, size: int = 25_000) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.model
@pytest.mark.parametrize("kind", sorted(MARKER_TEXTS))
def test_postprocessor_on_marker_text(engine: Any, kind: str) -> None:
    nodes = [NodeWithScore(node=TextNode(text=chunk)) for chunk in _chunks(_adversarial(kind))]
    post = ReContextEvidencePostprocessor(engine=engine)
    _answers_or_refuses(lambda: post.postprocess_nodes(nodes, query_str=MARKER_TEXTS[kind]))


@pytest.mark.model
@pytest.mark.parametrize("kind", sorted(MARKER_TEXTS))
def test_compressor_on_marker_text(engine: Any, kind: str) -> None:
    documents = [Document(page_content=chunk) for chunk in _chunks(_adversarial(kind))]
    compressor = ReContextCompressor(engine=engine)
    _answers_or_refuses(lambda: compressor.compress_documents(documents, MARKER_TEXTS[kind]))
