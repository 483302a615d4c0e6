"""Write docs/configuration.md from the settings' own help texts (``metadata["help"]``).

Usage: ``python scripts/config_reference.py [--check]``; ``--check`` fails when the page is stale
(``tests/unit/test_config_reference.py`` runs it).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _default(f: Any) -> str:
    if f.default is not MISSING:
        return repr(f.default).replace("\n", "\\n").replace("|", "\\|")
    return f"{f.default_factory.__name__}()" if f.default_factory is not MISSING else ""


def _table(cls: type) -> list[str]:
    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for f in fields(cls):
        rows.append(f"| `{f.name}` | `{_default(f)}` | {f.metadata['help']} |")
    return rows


def render() -> str:
    from recontext_engine import GenerationConfig, ReplayConfig
    from recontext_engine.selection import SIGNALS

    lines = [
        "# Configuration reference",
        "",
        "Generated from the settings' own help texts by `python scripts/config_reference.py`; a test",
        "keeps it in step with the code. Every setting is validated when the object is made; unknown",
        "names are refused.",
        "",
        "## `ReplayConfig`",
        "",
        *_table(ReplayConfig),
        "",
        "`with_options(**changes)` (and the keyword options of `answer`, `stream`, `select_evidence`)",
        "also takes the `GenerationConfig` settings and the selector's attention settings by name.",
        "",
        "## `GenerationConfig`",
        "",
        *_table(GenerationConfig),
        "",
        "## Selection signals (`ReplayConfig.selector`)",
    ]
    for name, cls in sorted(SIGNALS.items()):
        doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n    ", " ").replace("\n", " ")
        lines += ["", f"### `{cls.__name__}` (`{name}`)", "", doc, "", *_table(cls)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
