"""Seeded, offline calibration cases for head detection: planted facts among distractors and filler.

Six task families cover the kinds of lookups a retrieval head must serve: people attributes,
multi-key needles (number and word values), two-hop chains, conflicting versions, prose facts
and key-value records (JSON lines and table rows). Each case knows the character spans of its
gold facts, so any tokenizer and sentence splitter can map them back to sentences.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

FAMILIES = ("attribute", "multikey", "two_hop", "conflict", "prose", "records")
DEFAULT_LENGTHS = (300, 600, 1000, 1500)
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)

NAMES = (
    "Maria", "Tomas", "Anika", "Kofi", "Lena", "Ravi", "Yuki", "Omar", "Ingrid", "Mateo", "Priya", "Hugo",
    "Chiara", "Dmitri", "Amara", "Felix", "Sofia", "Kenji", "Leila", "Bruno", "Nadia", "Arjun", "Greta",
    "Samuel", "Elif", "Jonas", "Zainab", "Pablo", "Mei", "Oskar", "Fatima", "Lucas", "Hana", "Victor",
    "Rosa", "Emeka", "Clara", "Tariq", "Astrid", "Diego",
)  # fmt: skip
CITIES = (
    "Lisbon", "Oslo", "Lima", "Hanoi", "Dakar", "Quito", "Perth", "Riga", "Porto", "Cusco", "Tbilisi",
    "Bergen", "Nairobi", "Seville", "Krakow", "Osaka", "Valparaiso", "Tallinn", "Accra", "Ghent", "Bilbao",
    "Salta", "Izmir", "Leipzig", "Hobart", "Marseille", "Kyoto", "Tromso",
)  # fmt: skip
JOBS = (
    "pharmacist", "carpenter", "librarian", "pilot", "geologist", "baker", "translator", "surveyor",
    "veterinarian", "architect", "beekeeper", "electrician", "journalist", "florist",
)  # fmt: skip
INSTRUMENTS = ("cello", "trumpet", "harp", "accordion", "oboe", "banjo", "clarinet", "marimba", "violin")
ANIMALS = ("parrot", "tortoise", "ferret", "goldfish", "rabbit", "iguana", "hamster", "beagle", "canary")
COLORS = ("green", "crimson", "yellow", "violet", "orange", "turquoise", "grey", "white", "indigo", "amber")
DEPARTMENTS = ("finance", "logistics", "research", "legal", "marketing", "security", "design", "support")
ROOMS = ("attic", "cellar", "library", "garage", "greenhouse", "pantry", "workshop", "studio")
OBJECTS = (
    "compass", "telescope", "lantern", "typewriter", "globe", "chess set", "sextant", "camera",
    "music box", "barometer", "hourglass", "kite",
)  # fmt: skip
ADJECTIVES = (
    "silent", "amber", "hollow", "rapid", "frozen", "gentle", "crooked", "golden", "hidden", "northern",
    "copper", "velvet", "scarlet", "distant", "bitter", "lucky",
)  # fmt: skip
NOUNS = (
    "harbor", "falcon", "meadow", "lantern", "glacier", "orchard", "canyon", "beacon", "willow", "anchor",
    "comet", "prairie", "citadel", "thistle", "summit", "river",
)  # fmt: skip
WORD_VALUES = (
    "marigold", "quartz", "pelican", "saffron", "tundra", "obsidian", "juniper", "mistral", "cobalt",
    "sequoia", "zephyr", "topaz", "walrus", "paprika", "nebula", "basalt",
)  # fmt: skip
ISLANDS = ("Kell", "Marrow", "Tarn", "Ossery", "Brill", "Caldey", "Fenwick", "Harth", "Lundy", "Skerra")
TOWNS = ("Ambleford", "Dunmoor", "Eskwith", "Grantley", "Holloway", "Kirkby", "Marden", "Pellham", "Wrexley")
FOODS = ("honey", "chestnuts", "oysters", "pumpkins", "cherries", "mushrooms", "barley bread", "plums")
SHIPS = ("Aurora", "Kestrel", "Meridian", "Tempest", "Halcyon", "Osprey", "Calypso", "Endeavour")
CARGOES = ("salt", "tea", "copper ore", "wool", "timber", "spices", "coffee", "marble", "cotton")
TOPICS = ("glaciers", "bird migration", "prime numbers", "coral reefs", "volcanoes", "ancient maps", "fungi")
PRODUCTS = ("ladder", "crane", "trailer", "shelf unit", "hoist", "scaffold", "workbench", "cart")
POLICIES = ("travel", "parking", "remote work", "library loan", "visitor", "equipment", "overtime")
POLICY_ATTRS = (
    ("daily allowance", "euros"),
    ("limit", "days"),
    ("fee", "dollars"),
    ("quota", "hours"),
)

FILLER_SUBJECTS = (
    "The committee", "Most visitors", "A small team", "Local farmers", "The museum staff", "Two engineers",
    "The city council", "Several students", "The night shift", "An old fisherman", "The choir", "Neighbours",
    "The bakery owner", "A group of hikers", "The school board", "Volunteers", "The harbour master",
)  # fmt: skip
FILLER_VERBS = (
    "discussed", "reviewed", "repaired", "planned", "photographed", "measured", "painted", "ignored",
    "celebrated", "cleaned", "postponed", "described", "rebuilt", "visited", "debated", "organised",
)  # fmt: skip
FILLER_OBJECTS = (
    "the old bridge", "a new timetable", "the annual report", "the garden wall", "the village square",
    "a long list of complaints", "the station clock", "the winter market", "a broken fence",
    "the town archive", "the coastal path", "a set of maps", "the community hall", "the water tower",
    "a row of lamp posts",
)  # fmt: skip
FILLER_TIMES = (
    "last autumn", "every Tuesday", "after the rain", "before dawn", "during the holidays", "in early spring",
    "for most of the year", "without much fuss", "at great length", "over several weeks", "once again",
)  # fmt: skip
FILLER_REMARKS = (
    "Nobody seemed surprised by the outcome.",
    "The weather stayed mild for the season.",
    "It was, by all accounts, an ordinary week.",
    "A light wind came in from the sea.",
    "The results were filed away and soon forgotten.",
    "Some people preferred the earlier plan.",
    "The streets were quiet in the evening.",
    "Prices at the market barely changed.",
    "Trains ran on time most days.",
    "The river froze briefly in January.",
)
NOISE = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)


@dataclass(frozen=True)
class CalibrationCase:
    """One lookup: documents, a question, its answer and the character spans of the gold facts.

    ``gold`` holds ``(doc_index, start, end)`` with ``documents[doc_index][start:end]`` the fact.
    """

    family: str
    documents: tuple[str, ...]
    question: str
    answer: str
    gold: tuple[tuple[int, int, int], ...]
    depth: float
    target_tokens: int


@dataclass
class _Facts:
    gold: list[str]
    distractors: list[str]
    question: str
    answer: str
    line_based: bool = False  # records: one fact per line, the records themselves are the haystack


def _key(rng: random.Random) -> str:
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def _number(rng: random.Random, digits: int = 7) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


def _attribute(rng: random.Random) -> _Facts:
    relations = [
        ("{n} lives in {v}.", "Which city does {n} live in?", CITIES),
        ("{n} works as a {v} at the regional hospital.", "What is {n}'s job?", JOBS),
        ("{n} plays the {v} in a local band.", "Which instrument does {n} play?", INSTRUMENTS),
        ("{n} keeps a pet {v} at home.", "What kind of pet does {n} keep?", ANIMALS),
        ("The favourite colour of {n} is {v}.", "What is the favourite colour of {n}?", COLORS),
    ]
    people = rng.sample(NAMES, rng.randint(5, 9))
    fact, question, values = rng.choice(relations)
    if len(values) >= len(people):
        chosen = rng.sample(values, len(people))
    else:
        chosen = rng.choices(values, k=len(people))
    gold = fact.format(n=people[0], v=chosen[0])
    distractors = [fact.format(n=p, v=v) for p, v in zip(people[1:], chosen[1:], strict=True)]
    for other_fact, _, other_values in rng.sample([r for r in relations if r[0] != fact], 2):
        distractors.append(other_fact.format(n=people[0], v=rng.choice(other_values)))
    return _Facts([gold], distractors, question.format(n=people[0]), chosen[0])


def _multikey(rng: random.Random) -> _Facts:
    templates = [
        ("The special magic number for {k} is {v}.", "What is the special magic number for {k}?"),
        ("One of the special access codes for {k} is: {v}.", "What is the special access code for {k}?"),
        ("Remember that the passphrase of {k} is {v}.", "What is the passphrase of {k}?"),
        ("The locker labelled {k} opens with the code {v}.", "Which code opens the locker {k}?"),
    ]
    fact, question = rng.choice(templates)
    keys: list[str] = []
    while len(keys) < rng.randint(6, 14):
        key = _key(rng)
        if key not in keys:
            keys.append(key)
    words = rng.random() < 0.4 and "passphrase" in fact
    values = [rng.choice(WORD_VALUES) if words else _number(rng, rng.choice((5, 6, 7))) for _ in keys]
    facts = [fact.format(k=k, v=v) for k, v in zip(keys, values, strict=True)]
    return _Facts([facts[0]], facts[1:], question.format(k=keys[0]), values[0])


# Two-hop chains: a link "a -> b", then b's attribute; the question asks for a's attribute.
_CHAINS = (
    ("{a} is married to {b}.", "{b} was born in {v}.", "In which city was the spouse of {a} born?", CITIES),
    (
        "The manager of {a} is {b}.",
        "{b} leads the {v} department.",
        "Which department does the manager of {a} lead?",
        DEPARTMENTS,
    ),
)


def _two_hop(rng: random.Random) -> _Facts:
    kind = rng.randrange(3)
    if kind < len(_CHAINS):
        link, attribute, question, values = _CHAINS[kind]
        a, b, *others = rng.sample(NAMES, 8)
        value = rng.choice(values)
        gold = [link.format(a=a, b=b), attribute.format(b=b, v=value)]
        distractors = [link.format(a=others[i], b=others[i + 1]) for i in range(0, 4, 2)]
        distractors += [attribute.format(b=p, v=rng.choice(values)) for p in others[1:5]]
        return _Facts(gold, distractors, question.format(a=a), value)
    objects = rng.sample(OBJECTS, 5)
    boxes = [_number(rng, 3) for _ in objects]
    rooms = [rng.choice(ROOMS) for _ in objects]
    gold = [f"The {objects[0]} is packed in box {boxes[0]}.", f"Box {boxes[0]} is kept in the {rooms[0]}."]
    distractors = [f"The {o} is packed in box {b}." for o, b in zip(objects[1:], boxes[1:], strict=True)]
    distractors += [f"Box {b} is kept in the {r}." for b, r in zip(boxes[1:], rooms[1:], strict=True)]
    return _Facts(gold, distractors, f"In which room is the {objects[0]} kept?", rooms[0])


def _conflict(rng: random.Random) -> _Facts:
    if rng.random() < 0.5:
        policies = rng.sample(POLICIES, 3)
        attr, unit = rng.choice(POLICY_ATTRS)
        facts = []
        for policy in policies:
            old, new = rng.sample(range(5, 95), 2)
            y1 = rng.randint(2005, 2015)
            y2 = y1 + rng.randint(2, 8)
            facts.append(
                [
                    f"In {y1}, the {policy} policy set the {attr} to {old} {unit}.",
                    f"In {y2}, the {policy} policy was revised and the {attr} is now {new} {unit}.",
                    str(new),
                ]
            )
        question = f"What is the current {attr} under the {policies[0]} policy?"
    else:
        products = rng.sample(PRODUCTS, 3)
        facts = []
        for product in products:
            old, new = rng.sample(range(40, 400, 5), 2)
            facts.append(
                [
                    f"Version 1 of the {product} manual lists the maximum load as {old} kg.",
                    f"Version 2 of the {product} manual corrects the maximum load to {new} kg.",
                    str(new),
                ]
            )
        question = f"What maximum load does the latest {products[0]} manual give?"
    distractors = [s for pair in facts[1:] for s in pair[:2]]
    return _Facts(facts[0][:2], distractors, question, facts[0][2])


def _prose(rng: random.Random) -> _Facts:
    kinds = [
        (
            ISLANDS,
            COLORS,
            "The old lighthouse on {e} Island was painted {v} in {y}, after a long winter of storms.",
            "What colour was the lighthouse on {e} Island painted?",
        ),
        (
            TOWNS,
            FOODS,
            "Each spring the village of {e} holds a small festival devoted entirely to {v}.",
            "What is the spring festival in {e} devoted to?",
        ),
        (
            SHIPS,
            CARGOES,
            "When the ship {e} finally reached port in {y}, it was carrying a cargo of {v}.",
            "What cargo was the ship {e} carrying?",
        ),
        (
            NAMES,
            TOPICS,
            "Professor {e} published a first paper on {v} in {y}, to little attention at the time.",
            "What was the topic of Professor {e}'s first paper?",
        ),
    ]
    entities, values, fact, question = rng.choice(kinds)
    chosen = rng.sample(entities, min(len(entities), rng.randint(4, 6)))
    vals = [rng.choice(values) for _ in chosen]
    while vals[0] in vals[1:]:
        vals[0] = rng.choice(values)
    facts = [fact.format(e=e, v=v, y=rng.randint(1890, 1990)) for e, v in zip(chosen, vals, strict=True)]
    return _Facts([facts[0]], facts[1:], question.format(e=chosen[0]), vals[0])


def _hexid(rng: random.Random) -> str:
    return f"{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}"


def _records(rng: random.Random) -> _Facts:
    if rng.random() < 0.5:
        keys = [_hexid(rng) for _ in range(12)]
        values = [_hexid(rng) for _ in keys]
        lines = [f'"{k}": "{v}",' for k, v in zip(keys, values, strict=True)]
        question = f'What is the value of the key "{keys[0]}" in the JSON object?'
        return _Facts([lines[0]], lines[1:], question, values[0], line_based=True)
    orders = rng.sample(range(1000, 9999), 12)
    totals = [rng.randint(10, 999) for _ in orders]
    lines = [
        f"Order {o} | customer: {rng.choice(NAMES)} | city: {rng.choice(CITIES)} | total: {t} EUR"
        for o, t in zip(orders, totals, strict=True)
    ]
    return _Facts([lines[0]], lines[1:], f"What is the total of order {orders[0]}?", str(totals[0]), True)


_GENERATORS: dict[str, Callable[[random.Random], _Facts]] = {
    "attribute": _attribute,
    "multikey": _multikey,
    "two_hop": _two_hop,
    "conflict": _conflict,
    "prose": _prose,
    "records": _records,
}


def _filler_sentence(rng: random.Random, style: str) -> str:
    if style == "noise":
        return rng.choice(NOISE)
    if rng.random() < 0.2:
        return rng.choice(FILLER_REMARKS)
    return (
        f"{rng.choice(FILLER_SUBJECTS)} {rng.choice(FILLER_VERBS)} {rng.choice(FILLER_OBJECTS)} "
        f"{rng.choice(FILLER_TIMES)}."
    )


def _filler_record(rng: random.Random, facts: _Facts) -> str:
    """One more record in the style of the case's own records (the haystack of a records case)."""
    if facts.gold[0].startswith('"'):
        return f'"{_hexid(rng)}": "{_hexid(rng)}",'
    return (
        f"Order {rng.randrange(1000, 9999)} | customer: {rng.choice(NAMES)} | city: {rng.choice(CITIES)} "
        f"| total: {rng.randint(10, 999)} EUR"
    )


def _approx_tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def _stream(seed: int, split: str, index: int) -> random.Random:
    """An independent RNG per (seed, split, case): splits never share a case."""
    digest = hashlib.sha256(f"{seed}:{split}:{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def make_case(
    family: str,
    target_tokens: int,
    depth: float,
    rng: random.Random,
    count_tokens: Callable[[str], int] = _approx_tokens,
) -> CalibrationCase:
    """One case of ``family`` of about ``target_tokens`` tokens, the first gold fact at relative ``depth``."""
    facts = _GENERATORS[family](rng)
    fact_tokens = sum(count_tokens(s) + 1 for s in facts.gold + facts.distractors)
    budget = max(0, target_tokens - fact_tokens)
    style = rng.choice(("essay", "essay", "essay", "noise"))
    units: list[str] = []
    while budget > 0:
        sentence = _filler_record(rng, facts) if facts.line_based else _filler_sentence(rng, style)
        units.append(sentence)
        budget -= count_tokens(sentence) + 1
    tags: list[int] = [-1] * len(units)
    for sentence in facts.distractors:
        at = rng.randint(0, len(units))
        units.insert(at, sentence)
        tags.insert(at, -1)
    at = min(len(units), round(depth * len(units)))
    units.insert(at, facts.gold[0])
    tags.insert(at, 0)
    for j, sentence in enumerate(facts.gold[1:], start=1):
        # A newer version comes later; a second hop comes before or after, a few sentences apart.
        if family == "two_hop" and at >= 3 and rng.random() < 0.5:
            at = rng.randint(0, at - 3)
        else:
            at = rng.randint(min(len(units), at + 3), len(units))
        units.insert(at, sentence)
        tags.insert(at, j)
    return _assemble(family, facts, units, tags, depth, target_tokens, rng)


def _assemble(
    family: str,
    facts: _Facts,
    units: list[str],
    tags: list[int],
    depth: float,
    target_tokens: int,
    rng: random.Random,
) -> CalibrationCase:
    num_docs = 1 if rng.random() < 0.7 else rng.randint(2, 3)
    cuts = sorted(rng.sample(range(1, len(units)), num_docs - 1)) if len(units) > num_docs else []
    bounds = [0, *cuts, len(units)]
    documents: list[str] = []
    gold: list[tuple[int, int, int, int]] = []  # (tag, document, start, end)
    for doc_index in range(len(bounds) - 1):
        parts: list[str] = []
        cursor = 0
        since_break = 0
        for i in range(bounds[doc_index], bounds[doc_index + 1]):
            if parts:
                if facts.line_based:
                    sep = "\n"
                elif since_break >= rng.randint(3, 8):
                    sep, since_break = "\n\n", 0
                else:
                    sep = " "
                parts.append(sep)
                cursor += len(sep)
            if tags[i] >= 0:
                gold.append((tags[i], doc_index, cursor, cursor + len(units[i])))
            parts.append(units[i])
            cursor += len(units[i])
            since_break += 1
        text = "".join(parts)
        if facts.line_based and facts.gold[0].startswith('"'):
            # A JSON object: the records sit inside braces, one per line, no comma after the last.
            text = text.removesuffix(",")
            gold = [
                (t, d, s + 2, min(e, len(text)) + 2) if d == doc_index else (t, d, s, e)
                for t, d, s, e in gold
            ]
            text = "{\n" + text + "\n}"
        documents.append(text)
    ordered = tuple((d, s, e) for _, d, s, e in sorted(gold))
    documents_ = tuple(documents)
    return CalibrationCase(family, documents_, facts.question, facts.answer, ordered, depth, target_tokens)


def make_cases(
    count: int,
    *,
    seed: int = 0,
    split: str = "detect",
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    families: Sequence[str] = FAMILIES,
    count_tokens: Callable[[str], int] | None = None,
) -> list[CalibrationCase]:
    """``count`` cases, cycling families, lengths and depths so each is covered evenly.

    ``split`` names an independent stream: ``"detect"`` and ``"eval"`` with one seed never share a case.
    ``count_tokens`` sizes the contexts in the model's tokens (default: about 4 characters a token).
    """
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown calibration families {unknown}; known: {', '.join(FAMILIES)}")
    if count < 1 or not lengths or not families:
        raise ValueError("need at least one case, one length and one family")
    counter = count_tokens or _approx_tokens
    cases = []
    for i in range(count):
        rng = _stream(seed, split, i)
        family = families[i % len(families)]
        # Each family meets every length and depth within a few rounds, and one round spreads them.
        length = lengths[(i // len(families) + i) % len(lengths)]
        depth = min(0.95, max(0.0, DEPTHS[(i // len(families) + i) % len(DEPTHS)] + rng.uniform(-0.08, 0.08)))
        cases.append(make_case(family, length, depth, rng, counter))
    return cases
