"""Seeded, offline task generators modelled on RULER and HELMET.

Every generator returns a :class:`BenchCase`. Lengths are measured with a ``count_tokens``
callable (the engine's tokenizer in the benchmark), so a "1K" case really holds about 1,024
context tokens. The gold sentence sits at a chosen *depth* (0.0 = first sentence of the context,
1.0 = last); distractor facts sit at seeded random places. A context is either one text
(``layout="text"``) or a list of documents (``layout="docs"``, contiguous pieces of about 350
tokens, each a document of its own, as in HELMET's RAG tasks).

Task formats (``{...}`` are seeded random values; no two facts of one case share an entity):

``needle`` (RULER ``niah_multikey``; hops=1)
    Four needles ``The special magic {number|word} for {key} is: {value}.`` in filler text;
    ``key`` is an adjective-noun pair (``silent-meadow``), ``value`` a 7-digit number or a word
    (alternating by case, ``meta["value_kind"]``). Question: ``What is the special magic
    {kind} for {key}?`` Gold: the needle of the asked key.

``multi_hop`` (RULER variable tracking / HotpotQA-style bridge; hops=2)
    ``{person} works at {company}.`` and ``{company} is based in {city}.``, plus three distractor
    people and companies with cities. Question: ``Which city does {person} work in?`` The first
    hop sits at the stated depth, the second at a seeded random depth (``meta["hop_depths"]``).
    Gold: both sentences. ``multi_hop3`` adds a team in front (``{person} is a member of the
    {team} team.`` / ``The {team} team belongs to {company}.`` / ``{company} is based in
    {city}.``; hops=3).

``conflict`` (knowledge update; hops=1)
    ``{Policy} policy v1 ({year}): the {quantity} is {old} {unit}.`` and, at the stated depth,
    ``{Policy} policy v2 ({year'}, replaces v1): the {quantity} is {new} {unit}.``; the old
    version is placed before or after the new one at random (``meta["old_first"]``), and two
    other policies with their own two versions act as distractors. Question: ``Under the current
    {Policy} policy, what is the {quantity}?`` Answer: ``{new}``. Gold: the v2 sentence.

``json_kv`` (HELMET ``json_kv`` / Lost in the Middle key-value retrieval; hops=1)
    A JSON object, one ``"key": "value",`` pair per line, keys and values uuid-like hex
    (``8-4-4`` groups by default: long enough to be random, short enough for a 135M model to
    copy). In the ``docs`` layout each document is a JSON object of its own. Question:
    ``Extract the value corresponding to the specified key in the JSON object. Key: "{key}"``.
    Gold: the line of that key. Context length comes from the number of pairs (no filler).

Filler is natural-sounding prose from about thirty sentence templates over small word pools
(people, places, times, activities, objects, weather); it avoids digits and the vocabulary of
the facts, and uses varied determiners so that no single token (such as " the") dominates.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

CountTokens = Callable[[str], int]
Layout = Literal["text", "docs"]

DEPTHS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
LENGTH_TOLERANCE = 0.03  # measured context tokens within 3% of the target
DOC_TOKENS = 350  # tokens per document in the "docs" layout
PROMPT_TOKENS = 96  # chat template, document headers, evidence template and question
SENTENCE_TOKENS = 64  # bound on one generated sentence (the longest, in Arabic, has 58)
_PARAGRAPH = (4, 9)  # sentences per paragraph in filler text


@dataclass(frozen=True)
class GoldSpan:
    """A gold sentence: ``documents[doc_index][char_start:char_end]``."""

    doc_index: int
    char_start: int
    char_end: int


@dataclass
class BenchCase:
    """One benchmark case: a context, a question, its answers and where the evidence is."""

    case_id: str
    task: str
    context: str | list[str]
    question: str
    answers: list[str]
    gold: list[GoldSpan]
    depth: float | None
    length: int  # nominal length bucket (1024, 2048, ...), used to group results
    target_tokens: int  # the context length aimed at (the bucket, clamped to the model window)
    context_tokens: int  # the context length measured with the tokenizer
    hops: int
    layout: str = "text"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def documents(self) -> list[str]:
        return [self.context] if isinstance(self.context, str) else list(self.context)

    def gold_texts(self) -> list[str]:
        docs = self.documents
        return [docs[g.doc_index][g.char_start : g.char_end] for g in self.gold]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchCase:
        data = dict(data)
        data["gold"] = [GoldSpan(**g) for g in data.get("gold", [])]
        return cls(**data)


# -- word pools -------------------------------------------------------------------------------

_FILLER_NAMES = [
    "Ansel", "Brielle", "Cormac", "Delphine", "Eamon", "Fenna", "Gideon", "Hollis", "Ingrid", "Jasper",
    "Kestrel", "Linnea", "Magnus", "Nerys", "Oswin", "Perrin", "Quilla", "Rowan", "Saoirse", "Tobias",
    "Ulla", "Viggo", "Wren", "Yara", "Zephyr", "Odile", "Bram", "Isolde", "Lachlan", "Mireille",
]  # fmt: skip
_ROLES = [
    "a retired pilot", "her cousin", "our landlord", "an old friend", "my neighbour", "his uncle",
    "a young carpenter", "their piano teacher", "one of those cyclists", "a shy student",
    "an elderly fisherman", "her grandmother", "a travelling musician", "our postman",
    "a cheerful nurse", "his former classmate",
]  # fmt: skip
_PLACES = [
    "harbour", "market", "library", "orchard", "railway station", "bakery", "garden", "workshop",
    "museum", "riverbank", "bridge", "chapel", "meadow", "pier", "greenhouse", "bookshop", "square",
    "lighthouse", "vineyard", "ferry landing", "tea house", "boatyard", "plaza", "quarry",
]  # fmt: skip
_DETS = ["a", "our", "this", "that", "their", "one", "every", "her", "his", "some", "an old", "a small"]
_TIMES = [
    "on Tuesday", "after lunch", "before sunrise", "last winter", "every morning", "during spring",
    "at dusk", "over a long weekend", "on rainy evenings", "in early autumn", "around midday",
    "late at night", "on Sundays", "each summer", "most afternoons", "before supper",
]  # fmt: skip
_ACTIVITIES = [
    "painting fences", "repairing bicycles", "reading poetry", "sorting letters", "baking bread",
    "tuning pianos", "knitting scarves", "sketching birds", "planting tulips", "mending nets",
    "polishing silverware", "writing postcards", "carving spoons", "pressing flowers",
    "practising violin", "folding paper cranes", "brewing tea", "restoring clocks",
]  # fmt: skip
_OBJECTS = [
    "a blue umbrella", "two wooden chairs", "some ripe pears", "an old map", "several jars of honey",
    "a wicker basket", "a brass lantern", "fresh basil", "a woollen blanket", "three clay pots",
    "a pair of boots", "a dusty atlas", "some lemon cakes", "a silk scarf", "a copper kettle",
]  # fmt: skip
_WEATHER = [
    "light rain", "thick fog", "bright sunshine", "a cold wind", "a sudden storm", "soft snow",
    "warm drizzle", "a heavy mist", "clear skies", "gusty weather",
]  # fmt: skip
_ADJS = [
    "quiet", "busy", "windy", "crowded", "peaceful", "cheerful", "sleepy", "lively", "chilly",
    "charming", "noisy", "pleasant",
]  # fmt: skip
_TOPICS = [
    "migrating geese", "forgotten recipes", "local legends", "sailing routes", "mountain trails",
    "garden pests", "old songs", "village gossip", "distant cousins", "winter festivals",
    "strange dreams", "favourite novels",
]  # fmt: skip
_SMELLS = ["pine needles", "wet stone", "cinnamon", "sea salt", "cut grass", "woodsmoke", "lilac", "rain"]
_FEELINGS = ["calm", "curious", "nostalgic", "restless", "hopeful", "tired", "content", "amused"]

_TEMPLATES = [
    "{Name} spent {time} {activity} near {place}.",
    "{Role} bought {object} at {place} {time}.",
    "{Time}, {name} and {name2} walked along {place} talking about {topic}.",
    "Locals say {place} gets {adj} whenever {weather} rolls in.",
    "Nobody expected {weather} {time}, so {name} stayed home {activity}.",
    "{Name} keeps {object} by {poss} door, just in case.",
    "Visitors often describe {place} as {adj} but friendly.",
    "{Name}'s favourite pastime is {activity}, especially {time}.",
    "A small crowd gathered by {place} to listen to {role}.",
    "{Role} once wrote a long letter about {topic} and never sent it.",
    "After {weather}, {place} smelled of {smell}.",
    "Many people here enjoy {activity} when {weather} arrives.",
    "{Name} learned {activity} from {role} years ago.",
    "It felt {feeling} to watch {weather} settle over {place}.",
    "{Name} left {object} at {place} and went back for it {time}.",
    "Some evenings {role} hums {adj} tunes while {activity}.",
    "Whenever {name} feels {feeling}, a walk to {place} helps.",
    "{Role} swears that {place} looked different {time}.",
    "Rumour has it {name} knows every story about {topic}.",
    "There is a {adj} bench near {place} where {name} reads {time}.",
    "{Name} and {role} argued politely about {topic}.",
    "With {object} under one arm, {name} hurried towards {place}.",
    "{Time}, {place} was unusually {adj}.",
    "Few things make {name} as {feeling} as {activity}.",
    "Years later, {role} still talks about {weather} at {place}.",
    "{Name} painted {place} in shades of grey and gold.",
    "If {weather} returns, {name} plans to spend {time} {activity}.",
    "Children chased kites across {place} while {role} watched.",
    "{Name} traded {object} for {object2} with {role}.",
    "Someone left a note at {place} about {topic}.",
]

_PEOPLE_FIRST = [
    "Mira", "Tomas", "Ayla", "Dmitri", "Noor", "Felix", "Sunita", "Rafael", "Keiko", "Ola",
    "Henrik", "Lucia", "Emeka", "Priya", "Joaquin", "Anouk", "Kwame", "Elif", "Matteo", "Sigrid",
]  # fmt: skip
_PEOPLE_LAST = [
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Castellano", "Novak", "Haddad", "Brennan", "Ivanova",
    "Achterberg", "Quispe", "Falk", "Mbeki", "Oyelaran", "Rasmussen", "Delacroix", "Kowalczyk", "Sato",
]  # fmt: skip
_COMPANY_A = ["Cor", "Tell", "Vanta", "Brix", "Quill", "Nor", "Zeph", "Lum", "Orv", "Kest", "Pell", "Thal"]
_COMPANY_B = ["vane", "mark", "ora", "ton", "wick", "holt", "ara", "enix", "stead", "ium", "ridge", "ley"]
_COMPANY_C = ["Industries", "Labs", "Logistics", "Systems", "Holdings", "Works", "Analytics", "Foods"]
_CITIES = [
    "Lisbon", "Helsinki", "Montreal", "Nairobi", "Osaka", "Valparaiso", "Krakow", "Adelaide", "Tbilisi",
    "Reykjavik", "Marrakesh", "Hanoi", "Ljubljana", "Cordoba", "Winnipeg", "Bergen", "Tallinn",
    "Porto", "Dakar", "Busan",
]  # fmt: skip
_TEAMS = ["Falcon", "Harbor", "Granite", "Meridian", "Aurora", "Cobalt", "Juniper", "Summit", "Nimbus"]
_KEY_ADJ = [
    "silent", "amber", "crimson", "hollow", "gentle", "frozen", "golden", "hidden", "lucky", "misty",
    "rapid", "velvet", "wild", "ancient", "brisk", "dusky",
]  # fmt: skip
_KEY_NOUN = [
    "meadow", "falcon", "harbor", "lantern", "river", "summit", "thicket", "canyon", "compass", "glacier",
    "orchid", "beacon", "willow", "ember", "tundra", "prairie",
]  # fmt: skip
_VALUE_WORDS = [
    "marmalade", "saxophone", "pinecone", "telescope", "avalanche", "porcupine", "kaleidoscope",
    "harpsichord", "quicksand", "tambourine", "gondola", "dandelion", "chameleon", "boomerang",
    "cathedral", "origami", "labyrinth", "mandolin", "hurricane", "butterscotch",
]  # fmt: skip
_POLICIES = [
    ("Travel", "daily meal allowance", "euros"),
    ("Parking", "monthly permit fee", "dollars"),
    ("Overtime", "weekly overtime cap", "hours"),
    ("Remote work", "number of remote days per month", "days"),
    ("Equipment", "laptop budget", "pounds"),
    ("Training", "yearly course allowance", "francs"),
    ("Expense", "taxi reimbursement limit", "euros"),
]


# -- helpers ----------------------------------------------------------------------------------


def case_rng(seed: int, *parts: object) -> random.Random:
    """A ``random.Random`` seeded from ``seed`` and the case's parameters (stable across runs)."""
    key = "|".join([str(seed), *map(str, parts)]).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def filler_sentence(rng: random.Random) -> str:
    """One natural-sounding filler sentence (no digits, no fact vocabulary)."""
    template = rng.choice(_TEMPLATES)
    name, name2 = rng.sample(_FILLER_NAMES, 2)
    obj, obj2 = rng.sample(_OBJECTS, 2)
    time = rng.choice(_TIMES)
    text = template.format(
        name=name,
        Name=name,
        name2=name2,
        role=rng.choice(_ROLES),
        Role=_cap(rng.choice(_ROLES)),
        place=f"{rng.choice(_DETS)} {rng.choice(_PLACES)}",
        time=time,
        Time=_cap(time),
        activity=rng.choice(_ACTIVITIES),
        object=obj,
        object2=obj2,
        weather=rng.choice(_WEATHER),
        adj=rng.choice(_ADJS),
        topic=rng.choice(_TOPICS),
        smell=rng.choice(_SMELLS),
        feeling=rng.choice(_FEELINGS),
        poss=rng.choice(["her", "his", "their", "a neighbour's"]),
    )
    return text.replace(" a a", " an a").replace(" a o", " an o").replace(" a e", " an e")


def _uuid_like(rng: random.Random, groups: Sequence[int]) -> str:
    return "-".join("".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in groups)


def _depth_key(depth: float, n: int) -> float:
    """The gold's sort key among ``n`` filler units: depth 0 before the first, 1 after the last."""
    return depth * n - 0.5


def _fill(
    rng: random.Random,
    count_tokens: CountTokens,
    budget: int,
    sentence_of: Callable[[random.Random], str] = filler_sentence,
) -> list[str]:
    units: list[str] = []
    used = 0
    while used < budget:
        sentence = sentence_of(rng)
        units.append(sentence)
        used += count_tokens(" " + sentence)
    return units


def _chunk(units: list[tuple[str, int]], n_docs: int) -> list[list[tuple[str, int]]]:
    """Split (text, tokens) units into ``n_docs`` contiguous chunks of similar token count."""
    total = sum(t for _, t in units)
    chunks: list[list[tuple[str, int]]] = [[]]
    used = 0
    for unit in units:
        if len(chunks) < n_docs and used >= total * len(chunks) / n_docs and chunks[-1]:
            chunks.append([])
        chunks[-1].append(unit)
        used += unit[1]
    return chunks


def _join_prose(rng: random.Random, units: list[tuple[str, int]]) -> tuple[str, list[tuple[int, int]]]:
    """Join sentences into paragraphs; returns the text and each unit's (start, end)."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    cursor = 0
    until_break = rng.randint(*_PARAGRAPH)
    for i, (text, _) in enumerate(units):
        if i:
            sep = " "
            until_break -= 1
            if until_break <= 0:
                sep, until_break = "\n\n", rng.randint(*_PARAGRAPH)
            parts.append(sep)
            cursor += len(sep)
        spans.append((cursor, cursor + len(text)))
        parts.append(text)
        cursor += len(text)
    return "".join(parts), spans


def _join_json(units: list[tuple[str, int]]) -> tuple[str, list[tuple[int, int]]]:
    """Lines ``"k": "v",`` inside braces; each span covers its line (with the comma, if any)."""
    parts, spans, cursor = ["{\n"], [], 2
    for i, (text, _) in enumerate(units):
        line = text + ("," if i < len(units) - 1 else "")
        parts.append("  " + line + "\n")
        spans.append((cursor + 2, cursor + 2 + len(line)))
        cursor += len(line) + 3
    parts.append("}")
    return "".join(parts), spans


def _assemble(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    units: list[tuple[str, float, int]],
    layout: Layout,
    kind: Literal["prose", "json"],
) -> tuple[list[str], list[GoldSpan], list[float]]:
    """Order (text, sort key, gold rank) units (rank -1: not gold) and join them into documents.

    Returns the documents, the gold spans in rank order and each gold's measured depth: the
    fraction of context characters before it (0.0 = first, 1.0 = last).
    """
    units = sorted(units, key=lambda u: u[1])
    sized = [(text, count_tokens(" " + text)) for text, _, _ in units]
    n_docs = max(2, round(target / DOC_TOKENS)) if layout == "docs" else 1
    documents: list[str] = []
    located: list[tuple[int, int, int]] = []  # (doc, start, end) per unit, in order
    for doc_index, chunk in enumerate(_chunk(sized, n_docs)):
        text, spans = _join_json(chunk) if kind == "json" else _join_prose(rng, chunk)
        documents.append(text)
        located += [(doc_index, s, e) for s, e in spans]
    ranked = sorted((u[2], i) for i, u in enumerate(units) if u[2] >= 0)
    gold = [GoldSpan(*located[i]) for _, i in ranked]
    offsets = [0]
    for doc in documents[:-1]:
        offsets.append(offsets[-1] + len(doc))
    total = sum(len(d) for d in documents)
    depths = [
        (offsets[g.doc_index] + g.char_start) / max(1, total - (g.char_end - g.char_start)) for g in gold
    ]
    return documents, gold, depths


def _build_prose(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    placed: list[tuple[str, float | None, bool]],
    distractors: list[str],
    layout: Layout,
    sentence_of: Callable[[random.Random], str] = filler_sentence,
) -> tuple[list[str], list[GoldSpan], list[float]]:
    """Filler up to ``target`` tokens with facts inserted (``sentence_of``: one filler sentence).

    ``placed``: (text, depth, is_gold) facts at a chosen depth (None: a seeded random one);
    ``distractors`` go to random places strictly inside the filler, so a gold at depth 0 or 1
    stays first or last.
    """
    fact_tokens = sum(count_tokens(" " + t) for t, _, _ in placed) + sum(
        count_tokens(" " + t) for t in distractors
    )
    filler = _fill(rng, count_tokens, max(0, target - fact_tokens), sentence_of)
    n = len(filler)
    units = [(text, float(i), -1) for i, text in enumerate(filler)]
    for i, (text, depth, is_gold) in enumerate(placed):
        where = depth if depth is not None else rng.random()
        units.append((text, _depth_key(where, n) + 1e-6 * i, i if is_gold else -1))
    units += [(text, rng.uniform(-0.4, n - 0.6), -1) for text in distractors]
    return _assemble(rng, count_tokens, target, units, layout, "prose")


# -- task generators --------------------------------------------------------------------------


@dataclass
class _Draft:
    question: str
    answers: list[str]
    documents: list[str]
    gold: list[GoldSpan]
    gold_depths: list[float]
    hops: int
    meta: dict[str, Any]


def _people(rng: random.Random, n: int) -> list[str]:
    firsts = rng.sample(_PEOPLE_FIRST, n)
    lasts = rng.sample(_PEOPLE_LAST, n)
    return [f"{a} {b}" for a, b in zip(firsts, lasts, strict=True)]


def _companies(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    while len(names) < n:
        names.add(f"{rng.choice(_COMPANY_A)}{rng.choice(_COMPANY_B)} {rng.choice(_COMPANY_C)}")
    ordered = sorted(names)  # a set's order varies between processes; sort before shuffling
    rng.shuffle(ordered)
    return ordered


def _needle(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
) -> _Draft:
    kind = "number" if index % 2 == 0 else "word"
    keys: set[str] = set()
    while len(keys) < 4:
        keys.add(f"{rng.choice(_KEY_ADJ)}-{rng.choice(_KEY_NOUN)}")
    key_list = sorted(keys)
    rng.shuffle(key_list)
    if kind == "number":
        values = [str(rng.randint(1_000_000, 9_999_999)) for _ in key_list]
    else:
        values = rng.sample(_VALUE_WORDS, len(key_list))
    needles = [f"The special magic {kind} for {k} is: {v}." for k, v in zip(key_list, values, strict=True)]
    docs, gold, depths = _build_prose(
        rng, count_tokens, target, [(needles[0], depth, True)], needles[1:], layout
    )
    question = f"What is the special magic {kind} for {key_list[0]}?"
    return _Draft(question, [values[0]], docs, gold, depths, 1, {"value_kind": kind, "key": key_list[0]})


def _multi_hop(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
    hops: int = 2,
) -> _Draft:
    people = _people(rng, 4)
    companies = _companies(rng, 4)
    cities = rng.sample(_CITIES, 4)
    teams = rng.sample(_TEAMS, 4)
    chains = []
    for person, company, city, team in zip(people, companies, cities, teams, strict=True):
        located = f"{company} is based in {city}."
        if hops == 2:
            chains.append([f"{person} works at {company}.", located])
        else:
            chains.append(
                [
                    f"{person} is a member of the {team} team.",
                    f"The {team} team belongs to {company}.",
                    located,
                ]
            )
    # The first hop (the one naming the person) sits at the stated depth, later hops anywhere.
    placed: list[tuple[str, float | None, bool]] = [(chains[0][0], depth, True)]
    placed += [(text, None, True) for text in chains[0][1:]]
    distractors = [text for chain in chains[1:] for text in chain]
    docs, gold, depths = _build_prose(rng, count_tokens, target, placed, distractors, layout)
    question = f"Which city does {people[0]} work in?"
    meta = {"person": people[0], "company": companies[0]}
    return _Draft(question, [cities[0]], docs, gold, depths, hops, meta)


def _multi_hop3(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
) -> _Draft:
    return _multi_hop(rng, count_tokens, target, depth, layout, index, hops=3)


def _conflict(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
) -> _Draft:
    chosen = rng.sample(_POLICIES, 3)
    old_first = rng.random() < 0.5
    placed: list[tuple[str, float | None, bool]] = []
    distractors: list[str] = []
    answer, old_value = "", ""
    for i, (policy, quantity, unit) in enumerate(chosen):
        old = rng.randint(10, 60)
        new = old + rng.randint(5, 30)
        while str(old) in str(new) or str(new) in str(old):
            new += 1
        year1 = rng.randint(2012, 2018)
        year2 = year1 + rng.randint(2, 6)
        v1 = f"{policy} policy v1 ({year1}): the {quantity} is {old} {unit}."
        v2 = f"{policy} policy v2 ({year2}, replaces v1): the {quantity} is {new} {unit}."
        if i == 0:
            answer, old_value = str(new), str(old)
            # The superseded version is not gold; it sits before or after the current one.
            old_depth = rng.uniform(0.0, depth) if old_first else rng.uniform(depth, 1.0)
            placed = [(v2, depth, True), (v1, old_depth, False)]
        else:
            distractors += [v1, v2]
    docs, gold, depths = _build_prose(rng, count_tokens, target, placed, distractors, layout)
    policy, quantity, _ = chosen[0]
    question = f"Under the current {policy} policy, what is the {quantity}?"
    meta = {"policy": policy, "old_value": old_value, "old_first": old_first}
    return _Draft(question, [answer], docs, gold, depths, 1, meta)


def _json_kv(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
    groups: Sequence[int] = (8, 4, 4),
) -> _Draft:
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    used = 4  # braces and newlines
    while True:
        key, value = _uuid_like(rng, groups), _uuid_like(rng, groups)
        if key in seen:
            continue
        cost = count_tokens(f'  "{key}": "{value}",\n')
        if used + cost > target and pairs:
            break
        seen.add(key)
        pairs.append((key, value))
        used += cost
    gold_index = round(depth * (len(pairs) - 1))
    units = [(f'"{k}": "{v}"', float(i), 0 if i == gold_index else -1) for i, (k, v) in enumerate(pairs)]
    docs, gold, depths = _assemble(rng, count_tokens, target, units, layout, "json")
    gold_key, gold_value = pairs[gold_index]
    question = f'Extract the value corresponding to the specified key in the JSON object. Key: "{gold_key}"'
    return _Draft(question, [gold_value], docs, gold, depths, 1, {"key": gold_key, "pairs": len(pairs)})


# Facts and questions that share no content word: the question says it with synonyms, so BM25
# gives the gold sentence no credit (and may credit a fact that happens to share a word).
_PARAPHRASES: tuple[tuple[str, str], ...] = (
    ("The automobile was mended for {v} dollars.", "How much did it cost to fix the car?"),
    (
        "Our physician told grandfather to stroll {v} kilometres every day.",
        "How far should the old man walk daily according to his doctor?",
    ),
    (
        "The youngsters planted {v} saplings beside the pond.",
        "How many young trees did the children put near the lake?",
    ),
    ("The vessel stayed at the port for {v} days of repairs.", "How long was the ship kept in the harbour?"),
    (
        "The pupils read {v} novels during the holidays.",
        "How many books did the students finish over the vacation?",
    ),
    (
        "The chef purchased {v} kilograms of fish at dawn.",
        "How much seafood did the cook buy early in the morning?",
    ),
    ("The attorney charged {v} euros per hour for counsel.", "What fee does the lawyer ask for advice?"),
    ("The blaze destroyed {v} barns on the estate.", "How many farm buildings did the fire burn down?"),
)


def _paraphrase(
    rng: random.Random,
    count_tokens: CountTokens,
    target: int,
    depth: float,
    layout: Layout,
    index: int,
) -> _Draft:
    chosen = rng.sample(_PARAPHRASES, 6)
    values = rng.sample(range(12, 99), len(chosen))
    facts = [fact.format(v=v) for (fact, _), v in zip(chosen, values, strict=True)]
    docs, gold, depths = _build_prose(rng, count_tokens, target, [(facts[0], depth, True)], facts[1:], layout)
    return _Draft(chosen[0][1], [str(values[0])], docs, gold, depths, 1, {"fact": facts[0]})


# -- other languages: the needle and two-hop tasks over filler in the language ------------------


@dataclass(frozen=True)
class _LanguagePack:
    """Filler templates, word pools and fact/question templates of one language."""

    templates: tuple[str, ...]
    pools: dict[str, tuple[str, ...]]  # {name}, {place}, ... in the templates
    keys: tuple[str, ...]
    needle: str  # {key}, {value}
    needle_question: str  # {key}
    people: tuple[str, ...]
    companies: tuple[str, ...]
    cities: tuple[str, ...]
    works_at: str  # {person}, {company}
    based_in: str  # {company}, {city}
    hop_question: str  # {person}


_PACKS: dict[str, _LanguagePack] = {
    "de": _LanguagePack(
        templates=(
            "{name} ging {time} {place} spazieren.",
            "{name} las {time} {place} ein altes Buch.",
            "{Time} war es {place} sehr {adj}.",
            "{name} und {name2} sprachen {place} über {topic}.",
            "{name} kaufte {time} {object} {place}.",
            "Viele Leute sagen, dass es {place} {time} {adj} ist.",
            "{name} malte {time} ein Bild {place}.",
            "Nach dem Regen roch es {place} nach {smell}.",
            "{name} traf {time} {place} einen alten Freund.",
            "Niemand wusste, warum {name} {time} {place} wartete.",
        ),
        pools={
            "name": tuple(_FILLER_NAMES),
            "time": ("am Dienstag", "nach dem Mittagessen", "im letzten Winter", "jeden Morgen",
                     "im Frühling", "am Abend", "am Sonntag", "im Herbst", "gegen Mittag",
                     "spät in der Nacht"),
            "place": ("am Hafen", "im Garten", "in der Bibliothek", "auf dem Markt", "am Fluss",
                      "im Museum", "auf der Brücke", "in der Bäckerei", "am Bahnhof", "im Park"),
            "adj": ("ruhig", "windig", "kalt", "laut", "friedlich", "gemütlich", "neblig", "voll"),
            "topic": ("alte Lieder", "das Wetter", "ferne Reisen", "den Garten", "lustige Träume",
                      "die Nachbarn", "gute Bücher"),
            "object": ("einen blauen Schirm", "zwei Holzstühle", "frisches Brot", "eine alte Landkarte",
                       "einen Korb Äpfel", "eine Laterne", "warme Socken"),
            "smell": ("Kiefern", "nassem Stein", "Zimt", "frischem Gras", "Holzrauch"),
        },
        keys=tuple(f"{a}-{b}" for a in ("stille", "goldene", "wilde", "ferne", "dunkle", "helle")
                   for b in ("Wiese", "Brücke", "Quelle", "Mühle", "Insel", "Linde")),
        needle="Die spezielle Zahl für {key} lautet: {value}.",
        needle_question="Wie lautet die spezielle Zahl für {key}?",
        people=("Jonas Albrecht", "Lena Hoffmann", "Felix Brandt", "Greta Vogel", "Moritz Lang",
                "Paula Seidel", "Emil Hartmann", "Clara Winter"),
        companies=("Nordlicht AG", "Bergmann Werke", "Sonnenfeld GmbH", "Eichwald Technik",
                   "Rheinblick Logistik", "Falkenstein Systeme"),
        cities=("München", "Köln", "Wien", "Zürich", "Hamburg", "Leipzig", "Bremen", "Graz"),
        works_at="{person} arbeitet bei {company}.",
        based_in="{company} hat ihren Sitz in {city}.",
        hop_question="In welcher Stadt arbeitet {person}?",
    ),
    "zh": _LanguagePack(
        templates=(
            "{name}{time}在{place}散步。",
            "{name}{time}在{place}看书。",
            "{time}，{place}非常{adj}。",
            "{name}和{name2}在{place}聊{topic}。",
            "{name}{time}在{place}买了{object}。",
            "很多人说{place}{time}很{adj}。",
            "雨后，{place}有{smell}的味道。",
            "{name}{time}在{place}画画。",
            "{name}{time}在{place}遇到了一位老朋友。",
            "没有人知道{name}为什么{time}在{place}等人。",
        ),
        pools={
            "name": ("李明", "王芳", "张伟", "刘洋", "陈静", "杨磊", "赵敏", "黄婷", "许强", "何丽"),
            "time": ("星期二", "午饭后", "去年冬天", "每天早上", "春天", "傍晚", "星期天", "秋天",
                     "中午", "深夜"),
            "place": ("公园", "图书馆", "市场", "河边", "花园", "车站", "博物馆", "茶馆", "桥上", "面包店"),
            "adj": ("安静", "热闹", "寒冷", "舒服", "美丽", "拥挤", "凉快", "干净"),
            "topic": ("天气", "老歌", "旅行", "园艺", "邻居", "小说", "梦想"),
            "object": ("一把蓝色的伞", "两把木椅", "新鲜的面包", "一张旧地图", "一篮苹果", "一盏灯笼"),
            "smell": ("松树", "泥土", "桂花", "青草", "炊烟"),
        },
        keys=tuple(f"{a}{b}" for a in ("银色", "红色", "金色", "绿色", "蓝色", "白色")
                   for b in ("月亮", "山谷", "河流", "森林", "湖泊", "石桥")),
        needle="{key}的特别号码是：{value}。",
        needle_question="{key}的特别号码是什么？",
        people=("周文华", "吴晓东", "郑丽娟", "孙建国", "马海燕", "朱志强", "胡雪梅", "林国栋"),
        companies=("星光科技", "海天集团", "华锐公司", "金山实业", "远航物流", "蓝图软件"),
        cities=("杭州", "成都", "西安", "南京", "武汉", "青岛", "厦门", "大连"),
        works_at="{person}在{company}工作。",
        based_in="{company}位于{city}。",
        hop_question="{person}在哪个城市工作？",
    ),
    "ar": _LanguagePack(
        templates=(
            "ذهب {name} إلى {place} {time}.",
            "قرأ {name} كتابا قديما في {place} {time}.",
            "كان الجو في {place} {adj} {time}.",
            "تحدث {name} مع {name2} في {place} عن {topic}.",
            "اشترى {name} {object} من {place} {time}.",
            "يقول الناس إن {place} {adj} {time}.",
            "رسم {name} صورة {place} {time}.",
            "بعد المطر كانت رائحة {smell} تملأ {place}.",
            "التقى {name} بصديق قديم في {place} {time}.",
            "لم يعرف أحد لماذا انتظر {name} في {place} {time}.",
        ),
        pools={
            "name": ("سامي", "ليلى", "كريم", "نادية", "يوسف", "هدى", "عمر", "سلمى", "زياد", "رنا"),
            "time": ("يوم الثلاثاء", "بعد الظهر", "في الصباح", "في المساء", "في الشتاء الماضي",
                     "يوم الجمعة", "في الربيع", "في الخريف", "عند الغروب", "في منتصف الليل"),
            "place": ("السوق", "المكتبة", "الحديقة", "الميناء", "المتحف", "المحطة", "الشاطئ", "المقهى",
                      "الجسر", "المخبز"),
            "adj": ("هادئا", "باردا", "جميلا", "مزدحما", "لطيفا", "عاصفا", "دافئا"),
            "topic": ("الطقس", "الأغاني القديمة", "السفر", "الزراعة", "الجيران", "الروايات", "الأحلام"),
            "object": ("مظلة زرقاء", "كرسيين خشبيين", "خبزا طازجا", "خريطة قديمة", "سلة تفاح", "فانوسا"),
            "smell": ("الصنوبر", "التراب", "الياسمين", "العشب", "الحطب"),
        },
        keys=tuple(f"{a} {b}" for a in ("الوادي", "النهر", "الجبل", "البحر", "القمر", "الجسر")
                   for b in ("الأحمر", "الذهبي", "الأبيض", "الأزرق", "الفضي", "الأخضر")),
        needle="الرمز الخاص بمفتاح {key} هو: {value}.",
        needle_question="ما هو الرمز الخاص بمفتاح {key}؟",
        people=("خالد منصور", "رامي حداد", "طارق سليمان", "وليد عيسى", "مازن قاسم", "فادي نصار",
                "باسل عودة", "نبيل شاهين"),
        companies=("النور", "الأفق", "الرواد", "السنابل", "الواحة", "المدار"),
        cities=("عمان", "بيروت", "تونس", "الرباط", "الدوحة", "مسقط", "الكويت", "بغداد"),
        works_at="يعمل {person} في شركة {company}.",
        based_in="يقع مقر شركة {company} في مدينة {city}.",
        hop_question="في أي مدينة يعمل {person}؟",
    ),
}  # fmt: skip


def _pack_sentence(pack: _LanguagePack) -> Callable[[random.Random], str]:
    def sentence(rng: random.Random) -> str:
        values = {key: rng.choice(pool) for key, pool in pack.pools.items()}
        values["name2"] = rng.choice([n for n in pack.pools["name"] if n != values["name"]])
        values["Time"] = _cap(values["time"])
        return rng.choice(pack.templates).format(**values)

    return sentence


def _needle_in(language: str) -> Callable[..., _Draft]:
    pack = _PACKS[language]

    def build(
        rng: random.Random,
        count_tokens: CountTokens,
        target: int,
        depth: float,
        layout: Layout,
        index: int,
    ) -> _Draft:
        keys = rng.sample(pack.keys, 4)
        values = [str(rng.randint(1_000_000, 9_999_999)) for _ in keys]
        needles = [pack.needle.format(key=k, value=v) for k, v in zip(keys, values, strict=True)]
        docs, gold, depths = _build_prose(
            rng, count_tokens, target, [(needles[0], depth, True)], needles[1:], layout, _pack_sentence(pack)
        )
        question = pack.needle_question.format(key=keys[0])
        meta = {"language": language, "key": keys[0]}
        return _Draft(question, [values[0]], docs, gold, depths, 1, meta)

    return build


def _multi_hop_in(language: str) -> Callable[..., _Draft]:
    pack = _PACKS[language]

    def build(
        rng: random.Random,
        count_tokens: CountTokens,
        target: int,
        depth: float,
        layout: Layout,
        index: int,
    ) -> _Draft:
        people = rng.sample(pack.people, 4)
        companies = rng.sample(pack.companies, 4)
        cities = rng.sample(pack.cities, 4)
        chains = [
            [pack.works_at.format(person=p, company=c), pack.based_in.format(company=c, city=city)]
            for p, c, city in zip(people, companies, cities, strict=True)
        ]
        placed: list[tuple[str, float | None, bool]] = [
            (chains[0][0], depth, True),
            (chains[0][1], None, True),
        ]
        distractors = [text for chain in chains[1:] for text in chain]
        docs, gold, depths = _build_prose(
            rng, count_tokens, target, placed, distractors, layout, _pack_sentence(pack)
        )
        question = pack.hop_question.format(person=people[0])
        meta = {"language": language, "person": people[0], "company": companies[0]}
        return _Draft(question, [cities[0]], docs, gold, depths, 2, meta)

    return build


@dataclass(frozen=True)
class TaskSpec:
    """A task family: its generator and how many facts chain to the answer."""

    name: str
    hops: int
    build: Callable[..., _Draft]
    description: str


TASKS: dict[str, TaskSpec] = {
    "needle": TaskSpec("needle", 1, _needle, "multi-key needle, number or word values (RULER niah_multikey)"),
    "multi_hop": TaskSpec("multi_hop", 2, _multi_hop, "two-hop bridge: person -> company -> city"),
    "conflict": TaskSpec("conflict", 1, _conflict, "an old and a superseding policy version"),
    "json_kv": TaskSpec("json_kv", 1, _json_kv, "JSON key-value retrieval (HELMET json_kv)"),
    "multi_hop3": TaskSpec(
        "multi_hop3", 3, _multi_hop3, "three-hop chain: person -> team -> company -> city"
    ),
    "paraphrase": TaskSpec(
        "paraphrase", 1, _paraphrase, "lookup whose question shares no content word with the evidence"
    ),
}
_LANGUAGE_NAMES = {"de": "German", "zh": "Chinese", "ar": "Arabic (right to left)"}
for _code, _name in _LANGUAGE_NAMES.items():
    TASKS[f"needle_{_code}"] = TaskSpec(
        f"needle_{_code}", 1, _needle_in(_code), f"multi-key needle in {_name}"
    )
    TASKS[f"multi_hop_{_code}"] = TaskSpec(
        f"multi_hop_{_code}", 2, _multi_hop_in(_code), f"two-hop bridge in {_name}"
    )
MULTILINGUAL_TASKS: tuple[str, ...] = tuple(
    f"{kind}_{code}" for code in _LANGUAGE_NAMES for kind in ("needle", "multi_hop")
)
DEFAULT_TASKS: tuple[str, ...] = ("needle", "multi_hop", "conflict", "json_kv")


def longest_context(window: int, evidence_sentences: int, answer_tokens: int) -> int:
    """The longest target context (tokens) whose cases leave room in ``window`` for the prompt,
    ``evidence_sentences`` replayed sentences and the answer (contexts run up to LENGTH_TOLERANCE
    over their target)."""
    room = window - PROMPT_TOKENS - SENTENCE_TOKENS * evidence_sentences - answer_tokens
    return int(room / (1 + LENGTH_TOLERANCE))


def generate_case(
    task: str,
    *,
    length: int,
    depth: float,
    count_tokens: CountTokens,
    layout: Layout = "text",
    seed: int = 0,
    index: int = 0,
    max_tokens: int | None = None,
) -> BenchCase:
    """One case of ``task`` with about ``min(length, max_tokens)`` context tokens, gold at ``depth``."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    if layout not in ("text", "docs"):
        raise ValueError(f"layout must be 'text' or 'docs', got {layout!r}")
    spec = TASKS[task]
    target = min(length, max_tokens) if max_tokens else length
    aim = target
    for _ in range(3):
        # Joining changes tokenization a little: re-aim once or twice until within tolerance.
        rng = case_rng(seed, task, length, depth, layout, index)
        draft = spec.build(rng, count_tokens, aim, depth, layout, index)
        measured = sum(count_tokens(d) for d in draft.documents)
        if abs(measured - target) <= LENGTH_TOLERANCE * target:
            break
        aim = max(16, round(aim * target / max(1, measured)))
    context: str | list[str] = draft.documents[0] if layout == "text" else draft.documents
    answer_tokens = max(count_tokens(" " + a) for a in draft.answers)
    return BenchCase(
        case_id=f"{task}-{length}-d{depth:g}-{layout}-{index}",
        task=task,
        context=context,
        question=draft.question,
        answers=draft.answers,
        gold=draft.gold,
        depth=depth,
        length=length,
        target_tokens=target,
        context_tokens=measured,
        hops=draft.hops,
        layout=layout,
        meta={
            **draft.meta,
            "gold_depths": [round(d, 4) for d in draft.gold_depths],
            "answer_tokens": answer_tokens,
        },
    )


def generate_cases(
    tasks: Sequence[str],
    lengths: Sequence[int],
    depths: Sequence[float],
    *,
    count_tokens: CountTokens,
    layouts: Sequence[Layout] = ("text", "docs"),
    seed: int = 0,
    max_tokens: int | None = None,
    per_cell: int = 1,
) -> list[BenchCase]:
    """The grid task x length x depth (x ``per_cell`` repeats); layouts alternate along the grid."""
    make_case = functools.partial(generate_case, count_tokens=count_tokens, seed=seed, max_tokens=max_tokens)
    cases = []
    for task in tasks:
        for length in lengths:
            for d_index, depth in enumerate(depths):
                for rep in range(per_cell):
                    layout = layouts[(d_index + rep) % len(layouts)]
                    cases.append(make_case(task, length=length, depth=depth, layout=layout, index=rep))
    return cases
