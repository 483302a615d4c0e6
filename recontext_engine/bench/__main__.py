"""``python -m recontext_engine.bench [--quick] [--out DIR]``."""

from .cli import cli

raise SystemExit(cli())
