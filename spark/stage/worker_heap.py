"""Keep the Python worker's full garbage collections short.

PySpark's daemon runs a full collection after every task of a reused Python worker, and a
full collection visits every object the worker tracks: nearly all of them come from the
modules it imported once (PySpark, pandas, pyarrow, this library; about 100k objects and some
36 ms of CPU a collection on a 2-core machine, one or two per task). Frozen objects
(`gc.freeze`) are left out of every later collection, so a task collects once and freezes
what exists before it starts whenever the worker imported modules since the last freeze: in
practice at its first one or two tasks. Spark's planner workers (the processes that create a
Python data source and plan its reads) are reused the same way and collected after every
call, so this library's data sources freeze there too, when asked for their schema or reader.
A worker that is not reused (`spark.python.worker.reuse=false`: the daemon does not set
SPARK_REUSE_WORKER) exits after its task and is left alone. Objects freed by reference
counting are freed as before; only a reference cycle among objects alive at a freeze is never
collected, which bounds what can be kept to what was alive at those few freezes.
"""

from __future__ import annotations

import gc
import os
import sys

REUSE_VARIABLE = "SPARK_REUSE_WORKER"  # set by Spark in a worker's environment when reused
_frozen_at: tuple[int, int] | None = None  # (process id, count of imported modules)


def freeze_imported_objects() -> bool:
    """Collect, then freeze every tracked object, if this is a reused worker that imported
    modules since its last freeze (a forked child starts over). True when it froze."""
    global _frozen_at
    if not os.environ.get(REUSE_VARIABLE):
        return False
    now = (os.getpid(), len(sys.modules))
    if now == _frozen_at:
        return False
    gc.collect()
    gc.freeze()
    _frozen_at = now
    return True
