"""`python -m pyspark_dstl inspect|verify|cleanup|report <checkpoint-url>`: look after a
checkpoint root."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from pyspark_dstl.backend.errors import BackendError
from pyspark_dstl.backend.ops.cleanup import CleanupReport, cleanup_checkpoint
from pyspark_dstl.backend.ops.inspection import format_inspection, inspect_checkpoint
from pyspark_dstl.backend.ops.report_page import write_report
from pyspark_dstl.backend.ops.verify import verify_checkpoint
from pyspark_dstl.changelog.config import ChangelogOptions
from pyspark_dstl.changelog.errors import ChangelogError
from pyspark_dstl.changelog.storage_service import ChangelogStorage
from pyspark_dstl.materializer.errors import MaterializerError

CHANGELOG_CONF_PREFIX = "spark.dstl.changelog."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyspark_dstl",
                                     description="Inspect, verify, clean or report on a "
                                                 "checkpoint root.")
    parser.add_argument("command", choices=("inspect", "verify", "cleanup", "report"))
    parser.add_argument("url", help="checkpoint root, e.g. s3://bucket/query or file:///path")
    parser.add_argument("--apply", action="store_true",
                        help="cleanup: really delete (the default is a dry run)")
    parser.add_argument("--retain", type=int, default=100,
                        help="cleanup: committed batches to keep (minBatchesToRetain)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("-o", "--output", default="report.html",
                        help="report: the HTML file to write (default report.html)")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (e.g. a MinIO or test server)")
    parser.add_argument("--s3-region", help="S3 region")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help=f"any {CHANGELOG_CONF_PREFIX}* setting (repeatable)")
    return parser


def storage_options(args: argparse.Namespace) -> ChangelogOptions:
    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ChangelogError(f"--conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    if args.s3_endpoint:
        conf[CHANGELOG_CONF_PREFIX + "s3.endpoint"] = args.s3_endpoint
    if args.s3_region:
        conf[CHANGELOG_CONF_PREFIX + "s3.region"] = args.s3_region
    unknown = [key for key in conf if not key.startswith(CHANGELOG_CONF_PREFIX)]
    if unknown:
        raise ChangelogError(f"--conf {unknown[0]!r}: only {CHANGELOG_CONF_PREFIX}* settings "
                             f"apply to the tool")
    return ChangelogOptions.from_conf(conf, CHANGELOG_CONF_PREFIX)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Exit status: 0 fine, 1 problems found (verify, cleanup), 2 usage or access errors."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        storage = ChangelogStorage(args.url, storage_options(args))
    except ChangelogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args, storage, out)
    except (BackendError, ChangelogError, MaterializerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        storage.close()


def _run(args: argparse.Namespace, storage: ChangelogStorage, out: TextIO) -> int:
    if args.command == "inspect":
        report = inspect_checkpoint(storage)
        print(json.dumps(report, indent=1) if args.json else format_inspection(report),
              file=out)
        return 0
    if args.command == "report":
        count = write_report(storage, args.url, args.output)
        print(f"wrote {args.output}: {count} batch(es)", file=out)
        return 0
    if args.command == "verify":
        problems = verify_checkpoint(storage)
        if args.json:
            print(json.dumps({"problems": problems}, indent=1), file=out)
        else:
            for problem in problems:
                print(problem, file=out)
            print(f"{len(problems)} problem(s)", file=out)
        return 1 if problems else 0
    cleanup = cleanup_checkpoint(storage, args.retain, dry_run=not args.apply)
    print(json.dumps(_cleanup_dict(cleanup), indent=1) if args.json
          else _format_cleanup(cleanup), file=out)
    return 1 if cleanup.problems else 0


def _cleanup_dict(report: CleanupReport) -> dict[str, object]:
    return {"dry_run": report.dry_run, "files": report.files, "bytes": report.bytes,
            "floors": {s.store_id: s.floor for s in report.stores},
            "unrecognized": [p for s in report.stores for p in s.unrecognized],
            "unknown_stores": report.unknown_stores, "problems": report.problems,
            "incomplete_uploads": [info.path for info in report.incomplete_uploads]}


def _format_cleanup(report: CleanupReport) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    lines = [f"{verb} {path}" for path in report.files]
    lines += [f"{verb} {info.path} (temp file of an upload that never finished)"
              for info in report.incomplete_uploads]
    for store in report.stores:
        lines += [f"store {store.store_id}: left alone (no version in its name): {path}"
                  for path in store.unrecognized]
    lines += [f"store {store_id}: no retained checkpoint names it; left alone"
              for store_id in report.unknown_stores]
    lines += [f"problem: {problem}" for problem in report.problems]
    lines.append(f"{verb} {len(report.files)} file(s), {report.bytes} bytes"
                 + (" (dry run: pass --apply to delete)" if report.dry_run else ""))
    return "\n".join(lines)
