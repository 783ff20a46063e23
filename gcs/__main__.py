"""``python -m gcs``: see ``gcs.cli``."""

import sys

from .cli import main

sys.exit(main())
