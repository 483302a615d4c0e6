"""The language of a text, from its script and (for Latin script) its most frequent stop words.

Offline and dependency-free: enough to choose sentence-splitting rules and stop words, not a
general language identifier. ``ReplayConfig.language`` overrides it.
"""

from __future__ import annotations

import re
from functools import lru_cache

# (language, pattern of its script's letters), checked by share of the text's letters.
_SCRIPTS: tuple[tuple[str, str], ...] = (
    ("ja", r"[\u3040-\u30ff]"),  # kana: Japanese even when Han characters dominate
    ("zh", r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"),
    ("ko", r"[\uac00-\ud7af\u1100-\u11ff]"),
    ("ar", r"[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]"),
    ("he", r"[\u0590-\u05ff]"),
    ("ru", r"[\u0400-\u04ff]"),
    ("el", r"[\u0370-\u03ff]"),
    ("hi", r"[\u0900-\u097f]"),
    ("th", r"[\u0e00-\u0e7f]"),
)
_LATIN_STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        [
            "the",
            "of",
            "and",
            "to",
            "in",
            "is",
            "that",
            "it",
            "was",
            "for",
            "on",
            "are",
            "with",
            "as",
            "his",
            "they",
            "at",
            "be",
            "this",
            "from",
        ]
    ),
    "de": frozenset(
        [
            "der",
            "die",
            "und",
            "in",
            "den",
            "von",
            "zu",
            "das",
            "mit",
            "sich",
            "des",
            "auf",
            "für",
            "ist",
            "im",
            "dem",
            "nicht",
            "ein",
            "eine",
        ]
    ),
    "fr": frozenset(
        [
            "le",
            "la",
            "les",
            "de",
            "des",
            "et",
            "en",
            "un",
            "une",
            "du",
            "est",
            "que",
            "qui",
            "dans",
            "pour",
            "pas",
            "sur",
            "au",
            "avec",
        ]
    ),
    "es": frozenset(
        [
            "el",
            "la",
            "los",
            "las",
            "de",
            "del",
            "y",
            "en",
            "un",
            "una",
            "que",
            "es",
            "por",
            "con",
            "para",
            "se",
            "al",
            "lo",
            "como",
        ]
    ),
    "it": frozenset(
        [
            "il",
            "la",
            "le",
            "di",
            "che",
            "e",
            "un",
            "una",
            "per",
            "non",
            "sono",
            "del",
            "della",
            "con",
            "si",
            "gli",
            "nel",
            "alla",
        ]
    ),
    "pt": frozenset(
        [
            "o",
            "a",
            "os",
            "as",
            "de",
            "do",
            "da",
            "e",
            "em",
            "um",
            "uma",
            "que",
            "para",
            "com",
            "não",
            "por",
            "se",
            "na",
            "no",
            "dos",
        ]
    ),
    "nl": frozenset(
        [
            "de",
            "het",
            "een",
            "en",
            "van",
            "in",
            "is",
            "dat",
            "op",
            "te",
            "zijn",
            "met",
            "voor",
            "niet",
            "aan",
            "er",
            "die",
        ]
    ),
}
_WORD = re.compile(r"[^\W\d_]+")
_SAMPLE = 4000  # characters looked at


@lru_cache(maxsize=256)
def detect_language(text: str) -> str:
    """An ISO 639-1 code for ``text`` (``"en"`` when nothing points elsewhere)."""
    sample = text[:_SAMPLE]
    words = _WORD.findall(sample)
    letters = sum(len(w) for w in words)
    if letters:
        for language, pattern in _SCRIPTS:
            if len(re.findall(pattern, sample)) >= 0.2 * letters:
                return language
    lowered = [w.lower() for w in words]
    votes = {lang: sum(w in stop for w in lowered) for lang, stop in _LATIN_STOPWORDS.items()}
    best = max(votes, key=lambda lang: votes[lang])
    return best if votes[best] > votes["en"] else "en"


def documents_language(documents: list[str], language: str | None = None) -> str:
    """``language`` if given, else the language detected over the start of every document."""
    return language or detect_language(" ".join(d[:2000] for d in documents))
