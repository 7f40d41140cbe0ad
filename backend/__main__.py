"""Entry point of `python -m pyspark_dstl.backend` (the same tool as `python -m pyspark_dstl`)."""

import sys

from pyspark_dstl.backend.ops.cli import main

sys.exit(main())
