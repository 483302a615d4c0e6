"""``python -m recontext_engine``: the ``recontext`` command line (``--help`` lists its commands)."""

import sys

from .cli import main

sys.exit(main())
