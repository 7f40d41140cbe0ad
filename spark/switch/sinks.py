"""Sinks of the drop-in writer: each turns one batch's output DataFrame into the write that
Spark's own streaming sink of that kind would make, with that sink's guarantee.

A batch's sink runs before the batch's commit entry, so after a failure the same batch id can
reach the sink again with the same rows. File sinks (and tables stored as files) go through
Spark's own file sink, whose `_spark_metadata` log skips a batch id it already holds: readers
see every row exactly once, as with Spark. The memory sink skips a batch id it already holds.
Console, foreach, foreachBatch and every format passed through to Spark's batch writer (Kafka,
Delta, JDBC, ...) are at least once, as they are in Spark (foreachBatch gets the batch id to
make itself idempotent).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark_dstl.spark.pyspark_versions import FILE_STREAM_SINK_CLASSES, java_class
from pyspark_dstl.spark.session import is_connect
from pyspark_dstl.spark.spark_errors import DropInUsageError

Sink = Callable[[Any, int], None]
FILE_FORMATS = frozenset({"parquet", "json", "csv", "orc", "text", "avro", "xml"})
CONSOLE = "console"
MEMORY = "memory"
FOREACH_BATCH = "foreachBatch"
FOREACH = "foreach"
CONNECT_WORKER_URL = "SPARK_CONNECT_LOCAL_URL"  # set by Spark in Connect's foreachBatch worker


def console_sink(options: Mapping[str, str]) -> Sink:
    """Print each batch as Spark's console sink does (numRows, truncate)."""
    rows = int(options.get("numRows", options.get("numrows", 20)))
    truncate = str(options.get("truncate", "true")).lower() != "false"

    def sink(df: Any, batch_id: int) -> None:
        rule = "-" * 43
        print(f"{rule}\nBatch: {batch_id}\n{rule}", flush=True)
        df.show(rows, truncate)

    return sink


class MemorySink:
    """Rows of every batch kept on the driver and shown as the temporary view `name` of the
    session that started the query, as Spark's memory sink does; a batch id seen before is
    skipped. On Spark Connect, foreachBatch runs in a server process against a clone of the
    client's session, so the view is registered through the client's own session id there."""

    def __init__(self, name: str, schema: Any, spark: Any) -> None:
        self.name = name
        self.schema = schema
        self._batches: dict[int, list[Any]] = {}
        self._connect_session_id = spark.session_id if is_connect(spark) else None
        self._spark = None if is_connect(spark) else spark  # not pickled on Connect
        spark.createDataFrame([], schema).createOrReplaceTempView(name)  # empty from the start

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id in self._batches:
            return
        self._batches[batch_id] = df.collect()
        rows = [row for batch in sorted(self._batches) for row in self._batches[batch]]
        self._session().createDataFrame(rows, df.schema).createOrReplaceTempView(self.name)

    def _session(self) -> Any:
        if self._spark is None:
            from pyspark.sql.connect.session import SparkSession

            url = os.environ[CONNECT_WORKER_URL] + ";session_id=" + str(self._connect_session_id)
            self._spark = SparkSession.builder.remote(url).create()
        return self._spark


def foreach_sink(writer: Any) -> Sink:
    """Spark's foreach contract: a function of one row, or an object with process(row) and
    optional open(partition_id, epoch_id) -> bool and close(error)."""
    if not callable(writer) and not callable(getattr(writer, "process", None)):
        raise DropInUsageError(f"foreach({type(writer).__name__}): give a function of one "
                               f"row or an object with a process(row) method")

    def sink(df: Any, batch_id: int) -> None:
        def run_partition(rows: Any) -> None:
            from pyspark import TaskContext

            if not hasattr(writer, "process"):
                for row in rows:
                    writer(row)
                return
            context = TaskContext.get()
            partition = context.partitionId() if context is not None else 0
            opener = getattr(writer, "open", None)
            closer = getattr(writer, "close", None)
            error: BaseException | None = None
            try:
                if opener is None or opener(partition, batch_id):
                    for row in rows:
                        writer.process(row)
            except BaseException as exc:
                error = exc
                raise
            finally:
                if closer is not None:
                    closer(error)

        df.foreachPartition(run_partition)

    return sink


class FileSink:
    """Spark's own file sink (classic sessions): the batch's files and then the batch's entry in
    `<path>/_spark_metadata`, which readers of `path` follow; a batch id already in that log is
    skipped, so a rerun batch is not written twice."""

    def __init__(self, path: str, file_format: str, partition_by: Sequence[str],
                 options: Mapping[str, str]) -> None:
        self.path = path
        self.file_format = file_format
        self.partition_by = tuple(partition_by)
        self.options = dict(options)
        self._sink: Any = None

    def __call__(self, df: Any, batch_id: int) -> None:
        if self._sink is None:
            self._sink = self._spark_sink(df)
        self._sink.addBatch(batch_id, df._jdf)

    def _spark_sink(self, df: Any) -> Any:
        jvm = df.sparkSession._jvm
        session = df._jdf.sparkSession()
        source = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            self.file_format, session.sessionState().conf()).newInstance()
        if hasattr(source, "fallbackFileFormat"):  # a DataSource V2 file source
            source = source.fallbackFileFormat().newInstance()
        helpers = jvm.org.apache.spark.api.python.PythonUtils
        columns = jvm.java.util.ArrayList()
        for column in self.partition_by:
            columns.add(column)
        options = jvm.java.util.HashMap()
        for key, value in self.options.items():
            options.put(key, str(value))
        sink_class = java_class(jvm, FILE_STREAM_SINK_CLASSES)
        path = jvm.org.apache.hadoop.fs.Path(self.path)  # qualified, as Spark's writer does
        qualified = path.getFileSystem(session.sessionState().newHadoopConf()).makeQualified(path)
        return sink_class(session, qualified.toString(), source, helpers.toSeq(columns),
                          helpers.toScalaMap(options))


def batch_writer_sink(file_format: str, path: str | None, partition_by: Sequence[str],
                      options: Mapping[str, str]) -> Sink:
    """Any other format: Spark's batch writer appends each batch (at least once)."""

    def sink(df: Any, batch_id: int) -> None:
        writer = df.write.format(file_format).mode("append").options(**dict(options))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if path is None:
            writer.save()
        else:
            writer.save(path)

    return sink


def table_location(spark: Any, table: str) -> tuple[str | None, str | None]:
    """(provider, location) of a catalog table, from DESCRIBE TABLE EXTENDED."""
    described = {str(row[0]).strip(): str(row[1]).strip()
                 for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
                 if row[0] is not None and row[1] is not None}
    provider = described.get("Provider")
    return (provider.lower() if provider else None), described.get("Location")


def create_table(spark: Any, table: str, schema: Any, file_format: str,
                 partition_by: Sequence[str]) -> None:
    """CREATE TABLE IF NOT EXISTS with the output's schema, as toTable does in Spark."""
    columns = ", ".join(f"`{field.name}` {field.dataType.simpleString()}"
                        for field in schema.fields)
    partitioned = (f" PARTITIONED BY ({', '.join(f'`{c}`' for c in partition_by)})"
                   if partition_by else "")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING {file_format}"
              f"{partitioned}")


def table_sink(spark: Any, table: str, file_format: str | None, schema: Any,
               partition_by: Sequence[str], options: Mapping[str, str]) -> Sink:
    """toTable: create the table if needed; a table stored as files gets the file sink at its
    location (exactly once), any other table Spark's batch append (at least once)."""
    create_table(spark, table, schema,
                 file_format or str(spark.conf.get("spark.sql.sources.default")), partition_by)
    provider, location = table_location(spark, table)
    if provider in FILE_FORMATS and location and not is_connect(spark):
        return FileSink(location, provider, partition_by, options)

    def sink(df: Any, batch_id: int) -> None:
        df.write.mode("append").insertInto(table)

    return sink
