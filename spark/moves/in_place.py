"""The in-place move: a location holding Spark's own streaming checkpoint becomes a location of
this backend, and the same query goes on there with the next batch.

    python -m pyspark_dstl import-state <location> <location> --processor mod:Class
    spark.dstl.query.sparkCheckpoint=migrate   (a query on the switch, when it starts)

Spark's files stay where they are and are never changed: `metadata`, `offsets/<n>`,
`commits/<n>`, `sources/` and `state/<operator id>/` (which Spark's readers can still read).
This backend adds, in this order, each step crash-safe and repeated by the next attempt if a
kill interrupted it (kill points `move_in_place_*`):

1. a move marker as Spark's offset log entry N+1 (driver/ownership.py), so Spark's operator
   refuses the location from now on, naming the move;
2. a move record `moves/<n>` (started);
3. the state, imported as import-state does (importer.py; a query on the switch that chains
   stateful steps brings every chained operator's state, chain_import.py), committed as batch N at
   `commits/N.<generation>` beside Spark's `commits/N` (this backend's names always carry a
   generation, Spark's never do, so neither log reads the other's entries) and under
   `state/<operator name>/` beside Spark's `state/<operator id>/` (an operator name made of
   digits is refused here);
4. Spark's logs copied to the engine checkpoint (`<location>/engine`), without the marker, so
   the query here runs Spark's batch N+1 from the sources' positions and the file sink's log
   goes on with that batch id;
5. the move record (done), and one WARNING line (logger `pyspark_dstl.spark.moves.in_place`)
   saying what moved from which batch.

Until step 5 a query of this backend on the location is refused (or, with `migrate`, finishes
the move first), and from step 1 on Spark's is. Local locations only, as import-state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.spark.chain.links import ChainLink
from pyspark_dstl.spark.driver.ownership import (
    DONE,
    MIGRATE,
    STARTED,
    TO_DSTL,
    LocationStatus,
    MoveRecord,
    location_status,
    marker_bytes,
    write_marker,
    write_move,
)
from pyspark_dstl.spark.locations import to_url
from pyspark_dstl.spark.moves.importer import (
    ImportReport,
    PreparedImport,
    commit_import,
    prepare_import,
)
from pyspark_dstl.spark.moves.spark_checkpoint import (
    COMMITS,
    SparkCheckpoint,
    SparkCheckpointError,
    TargetNotEmptyError,
    copy_engine_logs,
    engine_is_empty,
    local_path,
)
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.stage.open_stores import executor_stores

log = logging.getLogger(__name__)
FIX = ("copy the Spark checkpoint to a local directory and import it into a new location "
       "(docs/migration.md, the runbook)")


@dataclass(frozen=True)
class MoveSetup:
    """Where and how: the location (URL), the engine checkpoint, the operator's settings,
    and the offsets the query here reads beyond the Spark query's sources (the tick
    source's)."""

    location: str
    engine: str
    settings: DstlSettings
    extra_offsets: tuple[str, ...] = ()


def move_in_place(spark: Any, processor: Any, setup: MoveSetup,
                  chain: Sequence[ChainLink] = ()) -> ImportReport:
    """Move (or finish moving) the Spark checkpoint at `setup.location` in place (module
    docstring). `processor`: the query's PySpark StatefulProcessor instance; `chain`: the
    steps the query chains after it, planned for its output mode (their state moves too)."""
    root = local_path(setup.location, "checkpoint location", FIX)
    engine = local_path(setup.engine, "engine checkpoint", FIX)
    storage = setup_storage(setup)
    status = location_status(storage)
    if not (status.spark_only or status.moving_in):
        raise TargetNotEmptyError(
            f"checkpoint location {str(root)!r}: nothing to move in place (it holds "
            f"{'state of this backend' if status.has_state else 'no Spark checkpoint'}"
            f"{'; ' + status.last_move.describe() if status.last_move else ''})")
    source = SparkCheckpoint.open(str(root))
    prepared = prepare_import(spark, source, processor, chain)
    batch = prepared.logs.batch_id
    _check(setup, status, source, prepared)
    variables = [v.name for v in prepared.operator.variables]
    chained = [item.describe() for item in prepared.chain]
    details = {"spark_operator": prepared.operator.name, "operator": _operator_name(setup),
               "partitions": prepared.partitions, "engine_checkpoint": setup.engine,
               "time_mode": prepared.operator.time_mode, "variables": variables,
               **({"chained": chained} if chained else {})}
    if batch + 1 not in status.spark.markers:
        write_marker(storage, batch + 1, marker_bytes(
            f"the state of this checkpoint moved to pyspark-dstl after Spark's batch {batch} "
            f"(in-place move); Spark's operator must not resume it: start the query with "
            f"pyspark_dstl.install(), or bring the state back with python -m pyspark_dstl "
            f"export-state (see moves/ here)", {"move": TO_DSTL, "batch_id": batch}))
    kill_point("move_in_place_marked")
    last = status.last_move
    if last is None or last.kind != TO_DSTL or last.phase != STARTED:
        write_move(storage, MoveRecord(TO_DSTL, STARTED, batch, source.url, details))
    kill_point("move_in_place_recorded")
    committed = CommitLog(storage).latest()
    records = 0
    if committed is None:
        path, records = commit_import(
            spark, prepared, setup.location, settings=setup.settings.settings,
            imported={"in_place": True})
    else:  # an earlier attempt committed the state and was interrupted after
        path = f"{COMMITS}/{committed[0]}.*"
    kill_point("move_in_place_committed")
    if engine_is_empty(engine):
        copy_engine_logs(source, engine, setup.extra_offsets)
    kill_point("move_in_place_engine_copied")
    write_move(storage, MoveRecord(TO_DSTL, DONE, batch, source.url, details))
    log.warning("checkpoint %s: Spark's own checkpoint moved in place to pyspark-dstl: the "
                "state of Spark's batch %d (%s) is this backend's batch %d, the query goes on "
                "with batch %d from the sources' positions; Spark's operator now refuses this "
                "location (python -m pyspark_dstl inspect %s shows the move)",
                setup.location, batch,
                "; ".join([", ".join(variables) or "timers only", *chained]),
                batch, batch + 1, str(root))
    return ImportReport(batch_id=batch, partitions=prepared.partitions,
                        key_columns=prepared.key_columns, time_mode=prepared.operator.time_mode,
                        variables=tuple(variables), records=records,
                        engine_checkpoint=setup.engine, commit_path=path, in_place=True,
                        chained=tuple(chained))


def settle_at_start(spark: Any, processor: Any, setup: MoveSetup,
                    chain: Sequence[ChainLink] = ()) -> ImportReport | None:
    """A query on the switch starts on `setup.location`: with `sparkCheckpoint=migrate` a
    Spark checkpoint there (or a move of it that was interrupted) is moved in place first;
    otherwise nothing happens here and the query's own check refuses the location
    (driver/ownership.check_location)."""
    if setup.settings.query.spark_checkpoint != MIGRATE:
        return None
    status = location_status(setup_storage(setup))
    if not (status.spark_only or status.moving_in):
        return None
    if processor is None:
        return None  # not a PySpark processor: the query's check refuses, with the command
    if "://" in setup.location and not setup.location.startswith("file://"):
        return None  # the query's check refuses it; import-state says why S3 is not moved
    return move_in_place(spark, processor, setup, chain)


def _check(setup: MoveSetup, status: LocationStatus, source: SparkCheckpoint,
           prepared: PreparedImport) -> None:
    """What would make the move ambiguous or unfinishable, before anything is written."""
    batch = prepared.logs.batch_id
    name = _operator_name(setup)
    if name.isdigit():
        raise TargetNotEmptyError(
            f"{QUERY_PREFIX}operatorName={name!r}: an in-place move keeps Spark's state under "
            f"state/<operator id>/, so this backend's operator needs a name that is not a "
            f"number; set another {QUERY_PREFIX}operatorName")
    last = status.last_move
    committed = CommitLog(setup_storage(setup)).latest()
    if committed is not None and (committed[0] != batch
                                  or "imported" not in committed[1].extra):
        raise TargetNotEmptyError(
            f"checkpoint location {str(source.root)!r} holds state of this backend at batch "
            f"{committed[0]} that is not the interrupted move's import of Spark's batch "
            f"{batch}: the location was changed by hand (docs/migration.md, abandoning a "
            f"move)")
    if last is not None and last.batch_id != batch:
        raise SparkCheckpointError(
            f"checkpoint location {str(source.root)!r}: the interrupted in-place move started "
            f"after Spark's batch {last.batch_id}, but Spark's last committed batch is now "
            f"{batch}; the location was changed by hand (docs/migration.md, abandoning a "
            f"move)")
    if _checkpoint_format_v2(source, batch):
        raise SparkCheckpointError(
            f"Spark checkpoint {str(source.root)!r} is in Spark's checkpoint format version 2 "
            f"(its commit log names state store ids); its state files would share names with "
            f"this backend's: import it into a new location instead (python -m pyspark_dstl "
            f"import-state <spark checkpoint> <new location> --processor ...)")
    engine = local_path(setup.engine, "engine checkpoint", FIX)
    if not engine_is_empty(engine) and not status.moving_in:
        raise TargetNotEmptyError(
            f"engine checkpoint {setup.engine!r} is not empty: a query of this backend ran "
            f"here before without state; remove {str(engine)!r} (Spark's engine logs of that "
            f"run) and move again")


def _checkpoint_format_v2(source: SparkCheckpoint, batch: int) -> bool:
    import json

    path = source.root / COMMITS / str(batch)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        return "stateUniqueIds" in json.loads(lines[1])
    except (OSError, IndexError, ValueError):
        return False


def _operator_name(setup: MoveSetup) -> str:
    return setup.settings.query.operator_name


def setup_storage(setup: MoveSetup) -> Any:
    """The location's storage, opened with the setup's settings."""
    backend = executor_stores().backend(setup.settings.backend_settings)
    return backend.context(to_url(setup.location)).storage



def setup_for(location: str, engine: str, settings: DstlSettings | Mapping[str, Any] | None,
              spark: Any, extra_offsets: Sequence[str] = ()) -> MoveSetup:
    """A MoveSetup from settings or spark.dstl.* overrides (read with the session's)."""
    if not isinstance(settings, DstlSettings):
        overrides = dict(settings or {})
        overrides[QUERY_PREFIX + "checkpointLocation"] = to_url(location)
        settings = DstlSettings.from_session(spark, overrides)
    return MoveSetup(to_url(location), to_url(engine), settings, tuple(extra_offsets))
