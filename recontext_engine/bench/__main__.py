"""``python -m recontext_engine.bench [--quick] [--out DIR]``."""

from .run import cli

raise SystemExit(cli())
