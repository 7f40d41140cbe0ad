"""spark.dstl.* settings: read on the driver, validated at query start, shipped as a plain dict.

The backend's own keys (state store, RocksDB, changelog, materialization) are parsed by
BackendSettings; the keys under `spark.dstl.query.` belong to the streaming integration.
Executors rebuild the settings from the same dict, so driver and tasks cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.backend_settings import SETTINGS_PREFIX, BackendSettings
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    BOOL,
    INT,
    SIZE,
    TEXT,
    WORD,
    Rule,
    Section,
    Settings,
    setting,
    setting_keys,
)
from pyspark_dstl.core.units import MIB

QUERY_SECTION = "query."
QUERY_PREFIX = SETTINGS_PREFIX + QUERY_SECTION
OUTPUT_MODES = ("collect", "files", "cache")
SPARK_CHECKPOINT_CHOICES = ("refuse", "migrate")
PLAIN_NAME = Rule("be a non-empty name without '/' or '..'",
                  lambda name: "/" not in name and ".." not in name)


@dataclass(frozen=True)
class QuerySettings(Settings):
    """Per-query knobs of the streaming integration, read on the driver only."""

    SECTION = Section(QUERY_PREFIX, "query")

    checkpoint_location: str | None = setting(
        "checkpointLocation", TEXT, None,
        "The checkpoint location (a path, `file://`, `s3://` or any fsspec URL) when "
        "`process(..., checkpoint_location=...)` does not give one.")
    engine_checkpoint_location: str | None = setting(
        "engineCheckpointLocation", TEXT, None,
        "Where Spark's own offsets and commits go (the engine checkpoint, written by Spark "
        "through Hadoop), for the builder and the switch alike; a checkpoint location that is "
        "not local (`s3://`, `s3a://`) needs it: a start without it is refused.",
        shown_default="`<checkpoint location>/engine` for local ones")
    partitions: int | None = setting(
        "partitions", INT, None,
        "Number of state partitions; a number other than the checkpoint's rescales its state "
        "before the first batch (docs/operations.md, Rescaling).", at_least=1,
        shown_default="as recorded in the checkpoint, else `spark.sql.shuffle.partitions`")
    operator_name: str = setting(
        "operatorName", TEXT, "stateful",
        "The operator's directory under `state/` and its name in the commit log.",
        rule=PLAIN_NAME)
    output_mode: str = setting(
        "outputMode", WORD, "files",
        "How the stateful stage's output reaches the sink, computed once per batch: "
        "`files` (each task writes its output once under "
        "the checkpoint, the sink reads the committed attempts' files; scales with the "
        "cluster), `collect` (every row to the driver as Arrow) or `cache` (persisted on the "
        "executors; a lost block runs the stage again).", choices=OUTPUT_MODES)
    output_inline_bytes: int = setting(
        "outputInlineBytes", SIZE, 1 * MIB,
        "`files` output mode: a task whose output is at most this size (Arrow bytes) returns "
        "it with its meta row instead of writing a file, which saves small batches a Spark "
        "job; the driver receives at most partitions x this per batch. `0` writes every "
        "output to a file.", at_least=0)
    spark_checkpoint: str = setting(
        "sparkCheckpoint", WORD, "refuse",
        "What a query on the switch does when its checkpoint location holds Spark's own "
        "streaming checkpoint and no state of this backend: `refuse` (before anything is "
        "written, with the command that moves the state) or `migrate` (move the state in "
        "place when the query starts, as `import-state <location> <location>` does; Spark's "
        "own operator then refuses the location). docs/migration.md, the runbook.",
        choices=SPARK_CHECKPOINT_CHOICES)
    cleanup_interval: int = setting(
        "cleanupInterval", INT, 10,
        "Run retention cleanup on the driver every N batches (between batches); `0` switches "
        "it off.", at_least=0, hint="0 switches cleanup off")
    log_progress: bool = setting(
        "logProgress", BOOL, False,
        "Show each batch's one-line summary on stderr even where Python logging is not "
        "configured. Either way the line is logged at INFO to `pyspark_dstl.progress`, and "
        "every metric of the batch as one JSON object at DEBUG to "
        "`pyspark_dstl.progress.json`: a logging configuration that shows those shows them.")
    observed_metrics: bool = setting(
        "observedMetrics", BOOL, True,
        "Put the newest committed batch's state metrics into Spark's progress reports "
        "(observed metrics `dstl_state`). Read inside the batch's own job, no Spark job of "
        "its own: one short listing and one read of the commit log per Python worker that "
        "reads an input partition, and one joined row per input row (docs/metrics.md "
        "measures it); the JSON log record, the commit entries and `stream.progress` keep "
        "every metric either way.")


QUERY_SETTING_KEYS: dict[str, str] = setting_keys(QuerySettings)
"""Field name -> key below spark.dstl.query."""


def normalize_key(key: str) -> str:
    """'changelog.persistDelay' and 'spark.dstl.changelog.persistDelay' name the same key."""
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(f"setting name must be a non-empty string, got {key!r}")
    key = key.strip()
    return key if key.startswith(SETTINGS_PREFIX) else SETTINGS_PREFIX + key


@dataclass(frozen=True)
class DstlSettings:
    """Validated settings of one query; `settings` is what travels to the executors."""

    settings: Mapping[str, str]
    backend: BackendSettings = field(compare=False)
    query: QuerySettings = field(compare=False)

    @property
    def backend_settings(self) -> dict[str, str]:
        """The settings the state backend reads (everything but spark.dstl.query.*)."""
        return {k: v for k, v in self.settings.items() if not k.startswith(QUERY_PREFIX)}

    @classmethod
    def resolve(cls, spark_conf: Mapping[str, str],
                overrides: Mapping[str, Any] | None = None) -> DstlSettings:
        """Session settings under spark.dstl., then per-query overrides (short or full keys)."""
        settings = {k: str(v) for k, v in spark_conf.items() if k.startswith(SETTINGS_PREFIX)}
        for key, value in (overrides or {}).items():
            settings[normalize_key(key)] = _to_setting(value)
        return cls.from_settings(settings)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> DstlSettings:
        frozen = dict(sorted(settings.items()))
        backend = BackendSettings.from_mapping(frozen, other_sections=(QUERY_SECTION,))
        return cls(frozen, backend, QuerySettings.from_mapping(frozen))

    @classmethod
    def from_session(cls, spark: Any, overrides: Mapping[str, Any] | None = None) -> DstlSettings:
        """Read every spark.dstl.* key of a SparkSession (runtime conf and SparkConf)."""
        found: dict[str, str] = {}
        for key, value in _launch_settings(spark):
            if key.startswith(SETTINGS_PREFIX):
                found[key] = value
        found.update({k: v for k, v in spark.conf.getAll.items() if k.startswith(SETTINGS_PREFIX)})
        return cls.resolve(found, overrides)


def _launch_settings(spark: Any) -> list[tuple[str, str]]:
    """The SparkConf's settings; a Spark Connect session has no SparkContext and shows its
    settings through spark.conf alone."""
    try:
        context = spark.sparkContext
    except AttributeError:  # Spark Connect: PySparkAttributeError
        return []
    return list(context.getConf().getAll())


def _to_setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)
