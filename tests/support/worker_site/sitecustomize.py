"""Python processes the tests' Spark starts import pyspark from the installed package, not
from Spark's pyspark.zip.

Spark puts its pyspark.zip first on the path of every Python process it starts (workers, data
source planners, the streaming source runner, transformWithState's driver worker), and
Python's zip importer keeps no bytecode cache: each new process compiles pyspark from source
again, about 0.45 s of CPU here, thousands of times in a test session. The zip and the package
are the same release (the zip sits inside the package), so moving the zip behind the package
changes which copy of the same files is read, not what runs. Only processes started with the
test harness's PYTHONPATH (tests/support/spark.py `prepare_environment`) read this module.
"""

import sys

for _entry in [entry for entry in sys.path if entry.endswith("pyspark.zip")]:
    sys.path.remove(_entry)
    sys.path.append(_entry)
