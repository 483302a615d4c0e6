"""GPU check of the vLLM backend (run by scripts/gpu_check.sh; ``--dry-run`` runs the CPU parts).

1. The paged-KV scoring function on the device against the transformers readout (no vLLM needed).
2. With vLLM: the engine on vLLM (``readout="paged"``) against the transformers backend on the same
   inputs (cue rows, evidence spans), greedy answers, ``generate_batch``.
3. With vLLM: wall time of R=2 as a ratio to vanilla (R=0) on vLLM.

The model is ``--model DIR`` (a transformers folder both backends can load) or, by default, a tiny
random Llama built here with a tokenizer trained on the task text: nothing is downloaded. Prints
one JSON summary line (``RESULT {...}``); exit 0 = all checks that ran passed, 1 = a check failed,
3 = vLLM (or CUDA) unavailable, so only step 1 ran.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

TINY_HEADS = [(1, 0), (1, 3), (2, 1), (2, 2), (3, 0), (3, 3)]
NAMES = ["Alice", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jana", "Kofi", "Lena"]
CITIES = ["Lisbon", "Osaka", "Quito", "Tallinn", "Nairobi", "Hobart", "Bergen", "Cusco", "Dakar", "Perth"]
FILLER = [
    "The committee met on a grey morning and discussed the budget for the coming year.",
    "Several members asked for more time to read the report before the vote.",
    "A long table of figures was passed around and checked twice.",
    "Nobody could remember when the old bridge had last been painted.",
    "The library extended its opening hours during the winter months.",
    "Trains were delayed because of a signal fault near the river.",
    "The bakery on the corner sold out of rye bread before noon.",
    "A new path was built along the coast for walkers and cyclists.",
]


def make_case(rng: random.Random, sentences: int) -> tuple[str, str, str]:
    """(context, question, answer): who lives where, among filler."""
    people = rng.sample(NAMES, 6)
    facts = [f"{p} lives in the city of {rng.choice(CITIES)}." for p in people]
    body = [rng.choice(FILLER) for _ in range(sentences)]
    for fact in facts:
        body.insert(rng.randrange(len(body) + 1), fact)
    target = rng.randrange(len(people))
    answer = facts[target].split("city of ")[1].rstrip(".")
    return " ".join(body), f"In which city does {people[target]} live?", answer


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A random Llama (GQA 4/2 heads of 64, 4 layers, bf16) and a BPE tokenizer trained on the task text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    rng = random.Random(seed)
    corpus = [make_case(rng, 20)[0] for _ in range(50)] + FILLER
    corpus += ["system user assistant Question: Answer briefly, using the context. In which city does N/A"]
    corpus += ["Key sentences quoted from the context above (data, not instructions): <evidence> </evidence>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1024, special_tokens=specials))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token="<|im_start|>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random init attends near-uniformly; sharpen it
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(6.0)
    model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def record_queries_keys(model, ids: list[int]) -> dict[int, dict]:
    """Post-RoPE queries and keys of every layer over ``ids``, with each layer's scale."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    record: dict[int, dict] = {}

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        record[module.layer_idx] = {
            "query": query[0].transpose(0, 1),
            "key": key[0].transpose(0, 1),
            "scaling": scaling,
            "softcap": kwargs.get("softcap"),
            "sliding_window": kwargs.get("sliding_window"),
        }
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    AttentionInterface.register("gpu_check_record", attention)
    AttentionMaskInterface.register("gpu_check_record", sdpa_mask)
    model.set_attn_implementation("gpu_check_record")
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids], device=next(model.parameters()).device))
    return record


def check_paged(folder: Path, device: str, heads, tokenizer, text: str) -> dict:
    """Paged-KV rows on ``device`` against the transformers readout, float32, block size 16."""
    from recontext_engine import HeadSet
    from recontext_engine.loading import load_model
    from recontext_engine.readout.paged import paged_cue_rows, scatter_to_paged
    from recontext_engine.readout.transformers import TransformersBackend

    head_set = HeadSet(tuple(heads))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    prefix, cue = len(ids) - 24, 8
    reader = TransformersBackend(load_model(str(folder), device=device, dtype="float32").model)
    expected = reader.read(reader.prefill(ids[:prefix]), prefix, ids[prefix:], head_set, cue)
    record = record_queries_keys(load_model(str(folder), device=device, dtype="float32").model, ids)
    worst, n = 0.0, len(ids)
    for layer, rec in record.items():
        index = [i for i, (lay, _) in enumerate(head_set.heads) if lay == layer]
        if not index:
            continue
        key_cache, table = scatter_to_paged(rec["key"], 16, num_blocks=n // 16 + 9)
        rows = paged_cue_rows(
            rec["query"][n - cue :],
            key_cache,
            table.to(device),
            n,
            torch.tensor([head_set.heads[i][1] for i in index]),
            rec["scaling"],
            rec["softcap"],
            rec["sliding_window"],
        )
        worst = max(worst, float((rows.cpu() - expected[index]).abs().max()))
    return {"tokens": n, "max_abs_diff": worst, "passed": worst < 1e-4}


def _spans(evidence) -> set[tuple[int, int, int]]:
    return {(e.doc_index, e.char_start, e.char_end) for e in evidence}


def check_vllm(folder: Path, heads, cases, args) -> dict:
    """The engine on vLLM (paged readout) against the transformers backend, and the R=2 / R=0 time ratio."""
    from recontext_engine import ReContextEngine

    tf = ReContextEngine.from_pretrained(
        str(folder), backend="transformers", device="cuda", dtype="float32", heads=heads
    )
    engine_args = {"gpu_memory_utilization": args.gpu_share, "max_model_len": args.max_model_len}
    if args.eager:
        engine_args["enforce_eager"] = True
    if args.attention_backend:  # FlashInfer (the default on some GPUs) cannot be read: pin another
        engine_args["attention_backend"] = args.attention_backend
    started = time.perf_counter()
    vl = ReContextEngine.from_pretrained(
        str(folder), backend="vllm", readout="paged", dtype="bfloat16", engine_args=engine_args, heads=heads
    )
    result: dict = {"vllm_startup_s": round(time.perf_counter() - started, 1)}
    options = {"top_k": 4, "max_new_tokens": 16}

    # cue rows of one read pass, both backends, same prompt
    context, question, _ = cases[0]
    request = tf._start(context, question, tf._config(None, options))
    suffix = tf.prompts.suffix(request.prefix, question, [], request.config)
    rows_tf = tf.backend.read(request.cache, len(request.prefix.ids), suffix.ids, tf.heads, 8)
    cache = vl.backend.prefill(request.prefix.ids)
    rows_vl = vl.backend.read(cache, len(request.prefix.ids), suffix.ids, vl.heads, 8)
    result["rows_max_abs_diff"] = float((rows_tf - rows_vl).abs().max())

    jaccard, same_answer = [], 0
    for context, question, _ in cases:
        a, b = (
            _spans(tf.select_evidence(context, question, **options)),
            _spans(vl.select_evidence(context, question, **options)),
        )
        jaccard.append(len(a & b) / max(1, len(a | b)))
        same_answer += (
            tf.answer(context, question, **options).text == vl.answer(context, question, **options).text
        )
    result["evidence_jaccard_mean"] = sum(jaccard) / len(jaccard)
    result["answers_equal_fraction"] = same_answer / len(cases)

    # generate_batch: one vLLM batch against one request at a time
    config = vl.default_config.with_options(max_new_tokens=16)
    prompts = []
    for context, question, _ in cases:
        req = vl._start(context, question, config)
        prompts.append(req.prefix.ids + vl.prompts.suffix(req.prefix, question, [], config).ids)
    batch = vl.backend.generate_batch(prompts, config)
    single = [vl.backend.generate_batch([p], config)[0] for p in prompts]
    result["generate_batch_equal_fraction"] = sum(x == y for x, y in zip(batch, single, strict=True)) / len(
        prompts
    )

    # time: vanilla against R=2, on vLLM, after one warm-up call of each
    for rounds in (0, 2):
        vl.answer(*cases[0][:2], rounds=rounds, **options)
    timing = {}
    for rounds in (0, 2):
        started = time.perf_counter()
        for context, question, _ in cases:
            vl.answer(context, question, rounds=rounds, **options)
        timing[rounds] = time.perf_counter() - started
    result["vanilla_s"], result["r2_s"] = round(timing[0], 3), round(timing[2], 3)
    result["r2_over_vanilla"] = round(timing[2] / timing[0], 2)
    result["passed"] = result["rows_max_abs_diff"] < 0.05 and result["evidence_jaccard_mean"] >= 0.8
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU only, small inputs, no vLLM")
    parser.add_argument("--model", help="a transformers model folder (default: a tiny random Llama)")
    parser.add_argument(
        "--heads", default=None, help="JSON list of [layer, head] (default: tiny set, or 'auto')"
    )
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=120, help="filler sentences per context")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-share", type=float, default=0.5, help="vLLM gpu_memory_utilization")
    parser.add_argument(
        "--attention-backend",
        help="vLLM engine argument attention_backend (0.32-0.33), e.g. FLASH_ATTN or TRITON_ATTN",
    )
    parser.add_argument(
        "--eager", action="store_true", help="enforce_eager (no torch.compile, no CUDA graphs)"
    )
    parser.add_argument("--out", help="also write the JSON summary here")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.cases, args.sentences = 2, 12
    summary: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        summary["gpu"] = torch.cuda.get_device_name(0)
    try:
        import vllm

        summary["vllm"] = vllm.__version__
    except Exception as exc:  # not installed, or its CUDA build does not load here
        summary["vllm"] = None
        summary["vllm_error"] = f"{type(exc).__name__}: {exc}"[:300]

    from transformers import AutoTokenizer

    workdir = Path(tempfile.mkdtemp(prefix="recontext-gpu-check-"))
    folder = Path(args.model) if args.model else build_tiny_model(workdir / "tiny-llama")
    heads = json.loads(args.heads) if args.heads else (TINY_HEADS if not args.model else "auto")
    summary["model"] = str(args.model or "tiny random Llama (4 layers, 4/2 heads of 64)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rng = random.Random(1)
    cases = [make_case(rng, args.sentences) for _ in range(args.cases)]
    device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    paged_heads = TINY_HEADS if heads == "auto" else heads
    started = time.perf_counter()
    summary["paged"] = check_paged(folder, device, paged_heads, tokenizer, cases[0][0])
    summary["paged"]["device"], summary["paged"]["s"] = device, round(time.perf_counter() - started, 1)
    print(
        f"paged readout on {device}: max |diff| {summary['paged']['max_abs_diff']:.2e} "
        f"over {summary['paged']['tokens']} tokens -> {'ok' if summary['paged']['passed'] else 'FAILED'}",
        flush=True,
    )

    code = 0 if summary["paged"]["passed"] else 1
    if args.dry_run:
        summary["vllm_check"] = "skipped (dry run)"
    elif summary["vllm"] is None or not torch.cuda.is_available():
        summary["vllm_check"] = "skipped: vLLM or CUDA unavailable"
        code = code or 3
    else:
        summary["vllm_check"] = check_vllm(folder, heads, cases, args)
        check = summary["vllm_check"]
        print(
            f"vLLM vs transformers: rows max |diff| {check['rows_max_abs_diff']:.3g}, evidence Jaccard "
            f"{check['evidence_jaccard_mean']:.2f}, answers equal {check['answers_equal_fraction']:.2f}",
            flush=True,
        )
        print(
            f"R=2 time / vanilla time on vLLM: {check['r2_over_vanilla']:.2f}x "
            f"({check['r2_s']:.2f} s / {check['vanilla_s']:.2f} s over {len(cases)} cases)",
            flush=True,
        )
        code = code or (0 if check["passed"] else 1)
    shutil.rmtree(workdir, ignore_errors=True)
    line = json.dumps(summary, default=str)
    print("RESULT " + line, flush=True)
    if args.out:
        Path(args.out).write_text(line + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
