"""`python -m pyspark_dstl inspect|verify|cleanup <checkpoint-url>`: the checkpoint tool."""

import sys

from pyspark_dstl.cli import main

sys.exit(main())
