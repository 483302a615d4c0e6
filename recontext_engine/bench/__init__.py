"""``recontext bench``: seeded offline tasks (RULER/HELMET style), the compared methods, metrics and reports.

Run it with ``recontext bench [--quick] [--out DIR]`` or ``python -m recontext_engine.bench``.
Nothing heavy is imported here; the engine, bm25s, sentence-transformers and matplotlib load on use.
"""

from .cli import add_arguments, main
from .methods import METHODS, Method, MethodContext, get_method, register_method
from .metrics import evidence_recall, exact_match, normalize_answer, substring_match
from .runner import run_bench
from .settings import BenchSettings
from .tasks import DEFAULT_TASKS, TASKS, BenchCase, GoldSpan, generate_case, generate_cases

__all__ = [
    "DEFAULT_TASKS",
    "METHODS",
    "TASKS",
    "BenchCase",
    "BenchSettings",
    "GoldSpan",
    "Method",
    "MethodContext",
    "add_arguments",
    "evidence_recall",
    "exact_match",
    "generate_case",
    "generate_cases",
    "get_method",
    "main",
    "normalize_answer",
    "register_method",
    "run_bench",
    "substring_match",
]
