"""``python -m gcs``: see ``gcs.cli.commands``."""

import sys

from gcs.cli.commands import main

sys.exit(main())
