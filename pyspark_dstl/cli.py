"""`python -m pyspark_dstl inspect|verify|cleanup|takeover|report <checkpoint-url>`: look after
a checkpoint location; `python -m pyspark_dstl rescale <checkpoint-url> --partitions N`
redistributes a stopped query's state over N partitions (no pyspark needed);
`python -m pyspark_dstl import-state <spark-checkpoint> <checkpoint>
--processor module:Class` brings a stopped PySpark query's state to a new checkpoint (or, given
the same location twice, moves it in place); `python -m pyspark_dstl export-state <checkpoint>
<spark-checkpoint> --processor module:Class` takes it back to a Spark checkpoint.

Every command but the moves first checks that the checkpoint location exists and holds a
checkpoint (exit status 2 if not): a mistyped URL must never read as "0 problems". `inspect`
shows the moves of a location; `rescale` and `takeover` refuse a location whose state moved
back to Spark. The moves need pyspark (the `spark` extra), which is imported only when such
a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.backend_settings import SETTINGS_PREFIX, FencingSettings
from pyspark_dstl.backend.fencing.lease import take_over
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.ops.cleanup import CleanupReport, cleanup_checkpoint
from pyspark_dstl.backend.ops.inspection import format_inspection, inspect_checkpoint
from pyspark_dstl.backend.ops.report_page import write_report
from pyspark_dstl.backend.ops.root import require_checkpoint
from pyspark_dstl.backend.ops.verify import verify_report
from pyspark_dstl.backend.rescale.layout import batch_layouts, format_layouts
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.core.errors import ConfigError, DstlError
from pyspark_dstl.materializer.materializer_errors import MaterializerError

CHANGELOG_SETTINGS_PREFIX = ChangelogSettings.SECTION.prefix
FENCING_SETTINGS_PREFIX = FencingSettings.SECTION.prefix


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyspark_dstl",
                                     description="Inspect, verify, clean, take over or report on a "
                                                 "checkpoint location; import a stopped PySpark "
                                                 "query's state.")
    parser.add_argument("command", choices=("inspect", "verify", "cleanup", "takeover",
                                            "report", "rescale", "import-state",
                                            "export-state"))
    parser.add_argument("url", help="checkpoint location, e.g. s3://bucket/query or file:///path "
                                    "(import-state: the stopped Spark query's checkpoint)")
    parser.add_argument("target", nargs="?",
                        help="import-state: the new checkpoint of this backend (empty; the "
                             "Spark checkpoint itself moves it in place); export-state: the "
                             "new Spark checkpoint (must not exist)")
    parser.add_argument("--processor", help="import-state, export-state: the query's PySpark "
                                            "StatefulProcessor as module:Class")
    parser.add_argument("--name", help="import-state, export-state: the operator name (as "
                                       "process(name=...))")
    parser.add_argument("--engine-checkpoint",
                        help="import-state: where Spark's logs go (default <target>/engine); "
                             "export-state: where they are (default <checkpoint>/engine)")
    parser.add_argument("--rows", action="store_true",
                        help="export-state: the query calls transformWithState (Rows), not "
                             "transformWithStateInPandas (default: as the checkpoint records)")
    parser.add_argument("--output-mode", choices=("Append", "Update"),
                        help="export-state: the outputMode of the query's transformWithState "
                             "call (default: as the checkpoint records)")
    parser.add_argument("--apply", action="store_true",
                        help="cleanup: really delete (the default is a dry run)")
    parser.add_argument("--retain", type=int, default=100,
                        help="cleanup: committed batches to keep (minBatchesToRetain)")
    parser.add_argument("--run", help="takeover: the run id of the holder known to be dead "
                                      "(as `inspect` shows it)")
    parser.add_argument("--partitions", type=int,
                        help="rescale: the new number of state partitions")
    parser.add_argument("--operator", help="rescale: the operator name (needed when the "
                                           "checkpoint has several)")
    parser.add_argument("--key-types",
                        help="rescale: the key columns' Spark types in order, e.g. "
                             "bigint,string (only for checkpoints that do not record them)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("-o", "--output", default="report.html",
                        help="report: the HTML file to write (default report.html)")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (e.g. a MinIO or test server)")
    parser.add_argument("--s3-region", help="S3 region")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help=f"any {CHANGELOG_SETTINGS_PREFIX}* or {FENCING_SETTINGS_PREFIX}* "
                             f"setting (import-state: any {SETTINGS_PREFIX}* setting; "
                             f"repeatable)")
    return parser


def tool_settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings the command line gives (`--conf KEY=VALUE`, as spark-submit takes them)."""
    settings: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ChangelogError(f"--conf {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value
    if args.s3_endpoint:
        settings[CHANGELOG_SETTINGS_PREFIX + "s3.endpoint"] = args.s3_endpoint
    if args.s3_region:
        settings[CHANGELOG_SETTINGS_PREFIX + "s3.region"] = args.s3_region
    allowed = ((SETTINGS_PREFIX,) if args.command == "rescale"
               else (CHANGELOG_SETTINGS_PREFIX, FENCING_SETTINGS_PREFIX))
    unknown = [key for key in settings if not key.startswith(allowed)]
    if unknown:
        raise ChangelogError(f"--conf {unknown[0]!r}: only {' and '.join(allowed)}* settings "
                             f"apply to {args.command}")
    return settings


def changelog_settings(args: argparse.Namespace) -> ChangelogSettings:
    return ChangelogSettings.from_mapping(tool_settings(args), CHANGELOG_SETTINGS_PREFIX)


def fencing_settings(args: argparse.Namespace) -> FencingSettings:
    return FencingSettings.from_mapping(tool_settings(args), FENCING_SETTINGS_PREFIX)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Exit status: 0 fine, 1 problems found (verify, cleanup), 2 usage or access errors."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    if args.command in ("import-state", "export-state"):
        return _move(args, out)
    try:
        storage = ChangelogService(args.url, changelog_settings(args))
        fencing = fencing_settings(args)
    except (ChangelogError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        require_checkpoint(storage)
        return _run(args, storage, fencing, out)
    except (BackendError, ChangelogError, MaterializerError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        storage.close()


def _run(args: argparse.Namespace, storage: ChangelogService, fencing: FencingSettings,
         out: TextIO) -> int:
    if args.command == "inspect":
        report = _with_moves(inspect_checkpoint(storage), storage)
        report["operators"] = _operators(storage)
        text = format_inspection(report)
        lines = [f"move: {move}" for move in report["moves"]]
        if report["spark_stores"]:
            lines.append(f"Spark's own state of the moved query, kept as Spark left it (not "
                         f"this backend's): {', '.join(report['spark_stores'])}")
        operators = [
            f"operator {op['name']} ({op['kind']}{': ' + op['label'] if op['label'] else ''}"
            f"): step {op['position']} of the chain, Spark operator id "
            f"{op['spark_operator_id']}, {op['partitions']} partition(s)"
            for op in report["operators"]]
        print(json.dumps(report, indent=1) if args.json
              else "\n".join([*text.splitlines()[:1], *lines, *text.splitlines()[1:],
                              *operators]),
              file=out)
        return 0
    if args.command in ("rescale", "takeover"):
        _refuse_moved_location(args, storage)
    if args.command == "report":
        count = write_report(storage, args.url, args.output)
        print(f"wrote {args.output}: {count} batch(es)", file=out)
        return 0
    if args.command == "verify":
        return _verify(args, storage, out)
    if args.command == "takeover":
        return _take_over(args, storage, fencing, out)
    if args.command == "rescale":
        return _rescale(args, storage, fencing, out)
    cleanup = cleanup_checkpoint(storage, args.retain, dry_run=not args.apply, fencing=fencing)
    print(json.dumps(_cleanup_dict(cleanup), indent=1) if args.json
          else _format_cleanup(cleanup), file=out)
    return 1 if cleanup.problems else 0


def _operators(storage: ChangelogService) -> list[dict[str, object]]:
    """The query's operators at the newest batch (the first stateful step and the steps
    chained after it); none when no entry can be read (inspect reports that problem)."""
    from pyspark_dstl.spark.operator_list import describe_operators

    try:
        latest = CommitLog(storage).latest()
    except DstlError:
        return []
    return describe_operators(latest[1]) if latest is not None else []


def _with_moves(report: dict[str, Any], storage: ChangelogService) -> dict[str, Any]:
    """The location's moves (driver/ownership.py); after a move from Spark, Spark's own stores
    (its operator ids under state/) are listed apart from this backend's."""
    from pyspark_dstl.spark.driver.ownership import TO_DSTL, read_moves

    moves = read_moves(storage)
    report["moves"] = [move.describe() for move in moves]
    report["spark_stores"] = []
    if any(move.kind == TO_DSTL for move in moves):
        spark_ids = sorted(s for s in report["stores"] if s.split("/")[0].isdigit())
        report["spark_stores"] = [f"state/{store_id}" for store_id in spark_ids]
        for store_id in spark_ids:
            report["stores"].pop(store_id)
    return report


def _refuse_moved_location(args: argparse.Namespace, storage: ChangelogService) -> None:
    from pyspark_dstl.spark.driver.ownership import TO_SPARK, read_moves

    moves = read_moves(storage)
    if moves and moves[-1].kind == TO_SPARK:
        raise ConfigError(f"{args.command} {args.url}: the location's state moved back to "
                          f"Spark's operator ({moves[-1].describe()}); it is left behind and "
                          f"no longer changed")


def _move(args: argparse.Namespace, out: TextIO) -> int:
    """import-state and export-state run in a SparkSession of their own (or the running one):
    Spark's own readers and operator do the reading and writing. pyspark is imported here
    only, so the other commands work without it."""
    if not args.target or not args.processor:
        what = ("<spark-checkpoint> <checkpoint>" if args.command == "import-state"
                else "<checkpoint> <spark-checkpoint>")
        print(f"error: {args.command} needs {what} --processor module:Class", file=sys.stderr)
        return 2
    settings: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith(SETTINGS_PREFIX):
            print(f"error: --conf {item!r}: expected {SETTINGS_PREFIX}KEY=VALUE", file=sys.stderr)
            return 2
        settings[key.strip()] = value
    try:
        from pyspark.sql import SparkSession

        from pyspark_dstl.spark.moves.export_state import export_state
        from pyspark_dstl.spark.moves.import_state import import_state
    except ImportError as exc:
        print(f"error: {args.command} needs pyspark (pip install 'pyspark-dstl[spark]'): "
              f"{exc}", file=sys.stderr)
        return 2
    spark = SparkSession.builder.appName(f"pyspark-dstl {args.command}").getOrCreate()
    try:
        if args.command == "import-state":
            report: Any = import_state(spark, args.url, args.target, args.processor,
                                       name=args.name, settings=settings,
                                       engine_checkpoint=args.engine_checkpoint)
        else:
            report = export_state(spark, args.url, args.target, args.processor,
                                  name=args.name, settings=settings,
                                  engine_checkpoint=args.engine_checkpoint,
                                  rows=True if args.rows else None,
                                  output_mode=args.output_mode)
    except DstlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.describe(), file=out)
    return 0


def _rescale(args: argparse.Namespace, storage: ChangelogService, fencing: FencingSettings,
             out: TextIO) -> int:
    """Ranges of key groups move; a hash-layout checkpoint's keys are hashed in Python (no
    pyspark import) and migrated to key groups once."""
    from pyspark_dstl.backend.backend_settings import BackendSettings
    from pyspark_dstl.spark.driver.rescale_query import rescale_offline

    if args.partitions is None or args.partitions < 1:
        raise ConfigError("rescale: --partitions N names the new number of state partitions "
                          "(at least 1)")
    settings = BackendSettings.from_mapping(tool_settings(args))
    types = [t.strip() for t in args.key_types.split(",")] if args.key_types else None
    record = rescale_offline(storage, settings, fencing, args.partitions,
                             operator=args.operator, key_types=types)
    if args.json:
        print(json.dumps(record, indent=1, sort_keys=True), file=out)
    elif not record["changed"]:
        print(f"operator {record['operator']!r} already has {record['partitions']} "
              f"partition(s) in {record['key_groups']} key groups at batch "
              f"{record['batch_id']}: nothing to do", file=out)
    else:
        done = "migrated to key groups" if record["migration"] else "rescaled"
        moved = (f"{record['keys']} key(s), {record['keys_moved']} moved, "
                 f"{record['bytes_read']} bytes read, {record['bytes_written']} bytes written"
                 if record["migration"] else
                 f"{record['bytes_read']} bytes read, {record['keys_copied']} key(s) copied "
                 f"one by one, {record['bytes_uploaded']} bytes uploaded and "
                 f"{record['bytes_shared']} of old stores' files named in place")
        print(f"{done} operator {record['operator']!r} at batch {record['batch_id']} from "
              f"{record['from_partitions']} to {record['to_partitions']} partition(s) "
              f"({record['method']}): {moved}, {record['seconds']:.2f} s; new layout in "
              f"{record['commit_entry']}", file=out)
    return 0


def _verify(args: argparse.Namespace, storage: ChangelogService, out: TextIO) -> int:
    report = verify_report(storage)
    layouts = batch_layouts(CommitLog(storage), [])  # unreadable entries: already problems
    if args.json:
        print(json.dumps({"problems": report.problems, "checkpoints": report.checkpoints,
                          "uncommitted": report.uncommitted, "layouts": layouts}, indent=1),
              file=out)
    else:
        for line in format_layouts(layouts):
            print(line, file=out)
        for problem in report.problems:
            print(problem, file=out)
        for attempt in report.uncommitted:
            print(f"not a checkpoint (its commit never completed): {attempt}", file=out)
        print(f"{report.checkpoints} checkpoint(s), {len(report.uncommitted)} uncommitted "
              f"attempt(s), {len(report.problems)} problem(s)", file=out)
    return 1 if report.problems else 0


def _take_over(args: argparse.Namespace, storage: ChangelogService, fencing: FencingSettings,
               out: TextIO) -> int:
    if not args.run:
        raise ConfigError("takeover: --run RUN_ID names the holder known to be dead (see "
                          "`inspect`)")
    record = take_over(storage, fencing, args.run)
    fenced = f"run {record.took_over[1]} (epoch {record.took_over[0]})" if record.took_over \
        else f"run {args.run}"
    print(f"{fenced} is fenced: it can no longer commit or delete anything in {storage.url}; "
          f"the checkpoint is free for the next run (takeover epoch {record.epoch})", file=out)
    return 0


def _cleanup_dict(report: CleanupReport) -> dict[str, object]:
    return {"dry_run": report.dry_run, "files": report.files, "bytes": report.bytes,
            "floors": {s.store_id: s.floor for s in report.stores},
            "unrecognized": [p for s in report.stores for p in s.unrecognized],
            "unknown_stores": report.unknown_stores, "problems": report.problems,
            "uncommitted": [a for s in report.stores for a in s.uncommitted],
            "deleted_by": (None if report.deleted_by is None else
                           {"epoch": report.deleted_by[0], "run_id": report.deleted_by[1]}),
            "incomplete_uploads": [info.path for info in report.incomplete_uploads]}


def _format_cleanup(report: CleanupReport) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    lines = [f"{verb} {path}" for path in report.files]
    lines += [f"{verb} {info.path} (temp file of an upload that never finished)"
              for info in report.incomplete_uploads]
    for store in report.stores:
        lines += [f"store {store.store_id}: left alone (no version in its name): {path}"
                  for path in store.unrecognized]
        lines += [f"store {store.store_id}: attempt {label} never completed its commit: "
                  f"its files go" for label in store.uncommitted]
    lines += [f"store {store_id}: no retained checkpoint names it; left alone"
              for store_id in report.unknown_stores]
    lines += [f"problem: {problem}" for problem in report.problems]
    lines.append(f"{verb} {len(report.files)} file(s), {report.bytes} bytes"
                 + (" (dry run: pass --apply to delete)" if report.dry_run else ""))
    return "\n".join(lines)
