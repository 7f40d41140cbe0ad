"""Python processes the tests' Spark starts import pyspark from the installed package, not
from Spark's pyspark.zip, and freeze their long-lived objects after the daemon's collections.

Spark puts its pyspark.zip first on the path of every Python process it starts (workers, data
source planners, the streaming source runner, transformWithState's driver worker), and
Python's zip importer keeps no bytecode cache: each new process compiles pyspark from source
again, about 0.45 s of CPU here, thousands of times in a test session. The zip and the package
are the same release (the zip sits inside the package), so moving the zip behind the package
changes which copy of the same files is read, not what runs.

PySpark's daemon runs a full collection after every task of a reused worker; this library's
tasks freeze what a worker holds first (spark/stage/worker_heap.py), but the workers that run
only PySpark's own operators in the comparisons do not, and spent about a minute of CPU per
suite in those collections. Where the tests ask for it (DSTL_TESTS_FREEZE_AFTER_COLLECT, set
by tests/conftest.py and dropped for the benchmark scripts, which measure what users run), an
explicit full collection is followed by a freeze whenever the process imported modules since
its last one: what the library does, for every worker. Outputs do not depend on it.

Only processes started with the test harness's PYTHONPATH (tests/support/spark.py
`prepare_environment`) read this module.
"""

import gc
import os
import sys

for _entry in [entry for entry in sys.path if entry.endswith("pyspark.zip")]:
    sys.path.remove(_entry)
    sys.path.append(_entry)

FREEZE_VARIABLE = "DSTL_TESTS_FREEZE_AFTER_COLLECT"

if os.environ.get(FREEZE_VARIABLE):
    _collect = gc.collect
    _frozen_at = None

    def _collect_then_freeze(generation: int = 2) -> int:
        global _frozen_at
        found = _collect(generation)
        now = (os.getpid(), len(sys.modules))
        if generation == 2 and now != _frozen_at:
            gc.freeze()
            _frozen_at = now
        return found

    gc.collect = _collect_then_freeze
