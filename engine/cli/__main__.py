"""``python -m engine.cli``: the engine's commands alone (``archledger`` adds the site's)."""
import sys

from engine.cli import main

sys.exit(main())
