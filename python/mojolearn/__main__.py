"""`python -m mojolearn` runs the command line (same as the `mojolearn` console script)."""

import sys

from .cli import main

sys.exit(main())
