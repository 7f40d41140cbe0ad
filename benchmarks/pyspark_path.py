"""The switch's PySpark-processor path in one process, for benchmarks/perkey_task.py.

`pyspark_adapter` wraps a PySpark StatefulProcessor the way the switch does on the driver
(its init() run with a declaring handle, the state schemas settled as schema id 0), without a
SparkSession: the benchmark processors declare StructType schemas, which need no parser.
`profile_split` runs one batch of that path under pyinstrument and adds up the wall time of
the profile's frames by what they do, so the profile reads as a table.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType

from pyspark_dstl.backend.lineage.schema_records import Declarations, SchemaHistory, SchemaRecord
from pyspark_dstl.spark.codec.schema_history import canonical_schema
from pyspark_dstl.spark.processors.declarations import declaring_handle
from pyspark_dstl.spark.pyspark_api.pyspark_rows import RowShape
from pyspark_dstl.spark.pyspark_api.pyspark_state import CompatHandle, SchemaBook
from pyspark_dstl.spark.pyspark_api.transform import ENTRIES, PySparkProcessorAdapter

KEY_STRUCT = StructType([StructField("user", StringType(), True)])

# (category, function names whose whole time is that category), looked for from the top of the
# profile down; the first match on a path takes the frame and everything under it
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the processor's output frame (pd.DataFrame in its own code)", ("DataFrame.__init__",)),
    ("value state get (stored bytes, decode)", ("CompatValueState.get",)),
    ("value state update (encode, transaction cache)", ("CompatValueState.update",)),
    ("a key's rows as a frame (slice of the batch's frame)", ("<lambda>", "renumbered",
                                                              "frame_of")),
    ("the batch's rows as one pandas frame", ("RowShape.pandas_frame", "RowShape.rows")),
    ("output frames checked (names, time zones)", ("RowShape.output_frame",
                                                   "RowShape.output_row")),
    ("output gathered into Arrow (once per batch)", ("OutputCollector.finish",)),
    ("grouping, key tuples and key bytes", ("KeyedBatch.__init__",)),
)
REST = "the processor's other code, adapter and runner loop"


def pyspark_adapter(processor: Any, rows_as: str, output_names: tuple[str, ...],
                    max_records: int = 10_000, max_bytes: int = 0) -> PySparkProcessorAdapter:
    """`processor` wrapped as the switch wraps it, its values written with schema id 0."""
    entry = ENTRIES[rows_as]
    book = SchemaBook()
    handle = CompatHandle(declaring_handle("none"), book, entry)
    declared = copy.deepcopy(processor)
    declared.init(handle)
    declared.close()
    declarations = Declarations(canonical_schema(KEY_STRUCT), dict(handle.declarations))
    shape = RowShape(rows_as=rows_as, zone="UTC", key_types=("string",),
                     output_names=output_names, max_records=max_records, max_bytes=max_bytes)
    adapter = PySparkProcessorAdapter(processor, shape, book.parsed, entry, declarations)
    adapter.history = SchemaHistory(0, {0: SchemaRecord(0, None, declarations, 0)})
    return adapter


def profile_split(run: Callable[[], Any]) -> tuple[Any, dict[str, float], float]:
    """(what `run` returned, seconds by category, seconds in all) of one run under
    pyinstrument (wall time, 0.2 ms sampling)."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002, async_mode="disabled")
    profiler.start()
    try:
        result = run()
    finally:
        session = profiler.stop()
    root = session.root_frame()
    seconds: dict[str, float] = defaultdict(float)
    top = _find(root, "run_processor")
    if top is None:
        return result, {}, 0.0
    _split(top, seconds)
    return result, dict(seconds), float(top.time)


def _find(frame: Any, function: str) -> Any:
    if frame.function == function:
        return frame
    for child in frame.children:
        found = _find(child, function)
        if found is not None:
            return found
    return None


def _category(frame: Any) -> str | None:
    name = frame.function
    owner = getattr(frame, "class_name", None)
    qualified = f"{owner}.{name}" if owner else name
    for category, functions in CATEGORIES:
        if qualified in functions or name in functions:
            return category
    return None


def _split(frame: Any, seconds: dict[str, float]) -> None:
    """The frame's time into its category, or its own time into REST and its children's
    time split the same way."""
    category = _category(frame)
    if category is not None:
        seconds[category] += frame.time
        return
    inside = 0.0
    for child in frame.children:
        inside += child.time
        _split(child, seconds)
    seconds[REST] += max(frame.time - inside, 0.0)
