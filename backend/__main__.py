"""Entry point of `python -m backend`."""

import sys

from backend.cli import main

sys.exit(main())
