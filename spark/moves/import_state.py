"""Bring the state along: a stopped PySpark transformWithState(InPandas) query's state becomes
the starting state of a location of this backend, and the query goes on from its next input.

    python -m pyspark_dstl import-state <spark-checkpoint> <location> --processor mod:Class
    pyspark_dstl.import_state(spark, spark_checkpoint, location, processor)

Into a new location: the state is committed there (importer.py) and Spark's logs are copied to
its engine checkpoint; the Spark checkpoint gets one file, a move marker (driver/ownership.py),
so that neither engine resumes it and the query cannot fork. In place (the same location
twice): the Spark checkpoint's location becomes this backend's (in_place.py), and Spark's own
operator refuses it from then on. A query that chains stateful steps after its
transformWithState is imported from Python with the chained query (`query=`), which the command
line cannot build (chain_import.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_dstl.core.by_name import load_by_name
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.chain.links import ChainLink
from pyspark_dstl.spark.chain.planning import for_output_mode
from pyspark_dstl.spark.chain.steps import ChainedSteps
from pyspark_dstl.spark.driver.ownership import (
    DONE,
    IMPORTED,
    MoveRecord,
    display_location,
    marker_bytes,
    write_marker,
    write_move,
)
from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.moves.importer import (
    ImportReport,
    commit_import,
    prepare_import,
    read_operators,
    tick_offsets,
)
from pyspark_dstl.spark.moves.in_place import move_in_place, setup_for, setup_storage
from pyspark_dstl.spark.moves.spark_checkpoint import (
    ChainImportError,
    ImportStateError,
    IncompleteSparkCheckpointError,
    NoTransformWithStateError,
    ProcessorMismatchError,
    SparkCheckpoint,
    SparkCheckpointError,
    TargetNotEmptyError,
    copy_engine_logs,
    engine_is_empty,
    local_path,
)

__all__ = [
    "ChainImportError",
    "ImportReport",
    "ImportStateError",
    "IncompleteSparkCheckpointError",
    "NoTransformWithStateError",
    "ProcessorMismatchError",
    "SparkCheckpointError",
    "TargetNotEmptyError",
    "import_state",
    "resolve_processor",
]

TARGET_FIX = "import into a local directory (it can be copied elsewhere as a whole)"


def resolve_processor(processor: Any) -> Any:
    """An instance, or "module:Class" (instantiated without arguments)."""
    from pyspark.sql.streaming import StatefulProcessor as PySparkProcessor

    if isinstance(processor, str):
        processor = load_by_name(processor, "processor", ConfigError)()
    if not isinstance(processor, PySparkProcessor):
        raise ConfigError(f"processor: {type(processor).__name__} is not a subclass of "
                          f"pyspark.sql.streaming.StatefulProcessor (import-state brings the "
                          f"state of PySpark's transformWithState queries)")
    return processor


def check_target(checkpoint_url: str, engine: str) -> None:
    root = local_path(checkpoint_url, "checkpoint", TARGET_FIX)
    for name in ("commits", "state"):
        directory = root / name
        if directory.is_dir() and any(directory.iterdir()):
            raise TargetNotEmptyError(
                f"checkpoint {checkpoint_url!r} already holds state ({name}/ is not empty): "
                f"import into a new, empty checkpoint location")
    if not engine_is_empty(local_path(engine, "engine checkpoint", TARGET_FIX)):
        raise TargetNotEmptyError(
            f"engine checkpoint {engine!r} is not empty: import into a new checkpoint "
            f"location whose engine directory does not exist yet")


def same_location(spark_checkpoint: str, location: str) -> bool:
    return to_url(spark_checkpoint).rstrip("/") == to_url(location).rstrip("/")


def import_state(spark: Any, spark_checkpoint: str, checkpoint_location: str, processor: Any,
                 *, name: str | None = None, settings: Mapping[str, Any] | None = None,
                 engine_checkpoint: str | None = None, query: Any = None,
                 output_mode: str = "append") -> ImportReport:
    """Make the state of the stopped transformWithState query at `spark_checkpoint` (at its
    last committed batch N) the starting state of `checkpoint_location`, and copy Spark's logs
    to the engine checkpoint (`<checkpoint location>/engine` by default), so that the same
    query started on this backend there goes on with batch N+1. The same location twice moves
    it in place.
    `processor`: the query's PySpark StatefulProcessor, an instance or "module:Class".
    `name`, `settings`: as process(...)'s. A query that chains stateful steps after its
    transformWithState brings their state too, given as `query`: the chained DataFrame as
    written with the switch on (or the builder's stream), and its `output_mode`."""
    processor = resolve_processor(processor)
    chain = chain_of(query, output_mode)
    url = to_url(checkpoint_location)
    SparkCheckpoint.open(spark_checkpoint)  # refuses what is not a local Spark checkpoint
    local_path(url, "checkpoint", TARGET_FIX)
    engine = engine_checkpoint or default_engine_checkpoint(url)
    overrides = dict(settings or {})
    if name is not None:
        overrides["spark.dstl.query.operatorName"] = name
    if same_location(spark_checkpoint, checkpoint_location):
        source = SparkCheckpoint.open(spark_checkpoint)
        time_mode = _time_mode_of_query(spark, source)
        return move_in_place(spark, processor, setup_for(url, engine, overrides, spark,
                                                         tick_offsets(time_mode)), chain)
    source = SparkCheckpoint.open(spark_checkpoint)
    check_target(url, engine)
    prepared = prepare_import(spark, source, processor, chain)
    mark_source(spark, source, prepared.logs.batch_id, url, overrides)
    path, records = commit_import(spark, prepared, url, name=name, settings=settings)
    copy_engine_logs(source, local_path(engine, "engine checkpoint", TARGET_FIX),
                     tick_offsets(prepared.operator.time_mode))
    operator = prepared.operator
    chained = [item.describe() for item in prepared.chain]
    write_move(setup_storage(setup_for(url, engine, overrides, spark)), MoveRecord(
        IMPORTED, DONE, prepared.logs.batch_id, source.url,
        {"spark_operator": operator.name, "partitions": prepared.partitions,
         **({"chained": chained} if chained else {})}))
    return ImportReport(batch_id=prepared.logs.batch_id, partitions=prepared.partitions,
                        key_columns=prepared.key_columns, time_mode=operator.time_mode,
                        variables=tuple(v.name for v in operator.variables),
                        records=records, engine_checkpoint=engine, commit_path=path,
                        chained=tuple(chained))


def chain_of(query: Any, output_mode: str) -> tuple[ChainLink, ...]:
    """The steps `query` chains after its first stateful step, planned for `output_mode` as
    when it starts (Spark's refusals for the mode come from here)."""
    if query is None:
        return ()
    from pyspark_dstl.spark.builder.stateful_stream import StatefulStream

    if isinstance(query, StatefulStream):
        return tuple(query.operator.spec.chain)
    steps = getattr(query, "chained_steps", None)
    if not isinstance(steps, ChainedSteps):
        raise ConfigError(
            f"query: {type(query).__name__} is not a chained query of this backend: give the "
            f"DataFrame of the query as written with pyspark_dstl.install() on (the result of "
            f"its last step before .writeStream), or the builder's stream")
    return for_output_mode(steps.links, output_mode, steps.entry)


def mark_source(spark: Any, source: SparkCheckpoint, batch_id: int, url: str,
                overrides: Mapping[str, Any]) -> None:
    """The Spark checkpoint left behind gets a move marker (driver/ownership.py): Spark's
    operator refuses it from now on, naming the new location, so the query cannot fork; a
    query of this backend started on it is refused too, naming the new location."""
    setup = setup_for(source.url, source.url, overrides, spark)
    storage = setup_storage(setup)
    write_marker(storage, batch_id + 1, marker_bytes(
        f"the state of this checkpoint was imported into {display_location(url)} by "
        f"pyspark-dstl after Spark's batch {batch_id}; Spark's operator must not resume it: "
        f"start the query with pyspark_dstl.install() and checkpointLocation "
        f"{display_location(url)}", {"move": IMPORTED, "batch_id": batch_id,
                                     "location": url}))


def _time_mode_of_query(spark: Any, source: SparkCheckpoint) -> str:
    return read_operators(spark, source, source.last_committed().batch_id)[0].time_mode
