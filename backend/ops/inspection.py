"""`inspect`: what a checkpoint location holds, per store: versions, lineage, sizes, files.

Attempts whose commit never completed (aborted or crashed after early uploads) are listed as
uncommitted: they are not checkpoints and cannot be loaded.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError, CommitLogError
from pyspark_dstl.backend.fencing.lease import holder_of
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.store_listing import StoreDirListing, list_stores
from pyspark_dstl.backend.ops.attempts import AttemptKey, attempts_of, read_newest_header
from pyspark_dstl.backend.ops.schema_report import (
    describe_schema_records,
    format_schema_records,
)
from pyspark_dstl.backend.rescale.layout import batch_layouts, format_layouts
from pyspark_dstl.materializer.remote import RemoteFiles


def inspect_checkpoint(storage: RemoteFiles) -> dict[str, Any]:
    """A JSON-safe description of the checkpoint location (the CLI prints it as text or JSON)."""
    commit_log = CommitLog(storage)
    latest_batch: int | None = None
    infos: dict[str, Any] = {}
    problems: list[str] = []
    try:
        latest = commit_log.latest()
    except CommitLogError as exc:
        latest = None
        problems.append(str(exc))
    if latest is not None:
        latest_batch = latest[0]
        infos = {info.store_id: info for info in latest[1].infos()}
    stores = {}
    for store_id, listing in list_stores(storage).items():
        info = infos.get(store_id)
        known = {(v, uid) for v, uid in info.lineage} if info is not None else set()
        stores[store_id] = _describe(listing, _uncommitted(storage, listing, known, problems))
        if info is not None:
            stores[store_id]["committed"] = {
                "version": info.version,
                "unique_id": info.unique_id,
                "base_unique_id": info.base_unique_id,
                "snapshot": (f"{info.materialized.version}_{info.materialized.unique_id}"
                             if info.materialized else None),
                "lineage": [f"{v}_{uid}" for v, uid in info.lineage],
                "changelog_bytes": info.changelog.size,
                "changelog_files": len(info.changelog.paths),
                "pending_snapshot": (f"{info.pending_snapshot[0]}_{info.pending_snapshot[1]}"
                                     if info.pending_snapshot else None),
            }
    return {"url": getattr(storage, "url", None), "batches": commit_log.batch_ids(),
            "latest_batch": latest_batch, "fences": len(commit_log.fences()),
            "holder": _holder(storage, problems),
            "stores": stores,
            "state_schemas": describe_schema_records(
                storage, latest[1] if latest is not None else None, problems),
            "layouts": batch_layouts(commit_log, problems),
            "problems": problems}


def _holder(storage: RemoteFiles, problems: list[str]) -> dict[str, Any] | None:
    try:
        holder = holder_of(storage)
    except BackendError as exc:
        problems.append(str(exc))
        return None
    if holder is None:
        return None
    record = holder.record
    return {"run_id": record.run_id, "epoch": record.epoch, "purpose": record.purpose,
            "process": record.process.to_dict(), "lease_seconds": record.lease_seconds,
            "renewals": holder.renewals, "ended": holder.ended,
            "took_over": (None if record.took_over is None else
                          {"epoch": record.took_over[0], "run_id": record.took_over[1]})}


def _uncommitted(storage: RemoteFiles, listing: StoreDirListing, known: set[AttemptKey],
                 problems: list[str]) -> set[AttemptKey]:
    """Attempts whose newest file says their commit never completed (one header read per
    attempt the latest commit does not already vouch for)."""
    found: set[AttemptKey] = set()
    for key, attempt in attempts_of(listing).items():
        if key in known:
            continue
        try:
            newest = read_newest_header(storage, listing.store_id, attempt)
        except BackendError as exc:
            problems.append(str(exc))
            continue
        if not newest.status.is_checkpoint:
            found.add(key)
    return found


def _describe(listing: StoreDirListing, uncommitted: set[AttemptKey]) -> dict[str, Any]:
    versions: dict[int, dict[str, list[str]]] = {}

    def slot(version: int) -> dict[str, list[str]]:
        return versions.setdefault(version, {"changelog": [], "uncommitted": [],
                                             "snapshot": []})

    for name, _ in listing.changelogs:
        kind = "uncommitted" if (name.version, name.unique_id) in uncommitted else "changelog"
        ids = slot(name.version)[kind]
        if name.unique_id not in ids:
            ids.append(name.unique_id)
    for name, _ in listing.manifests:
        slot(name.version)["snapshot"].append(name.unique_id)
    return {
        "changelog_files": len(listing.changelogs),
        "changelog_bytes": sum(info.size for _, info in listing.changelogs),
        "snapshots": len(listing.manifests),
        "data_files": len(listing.data_files),
        "data_bytes": sum(info.size for info in listing.data_files),
        "other_files": [info.path for info in listing.other],
        "versions": {str(v): ids for v, ids in sorted(versions.items())},
    }


def format_inspection(report: dict[str, Any]) -> str:
    lines = [f"checkpoint {report['url']}: {len(report['batches'])} committed batch(es), "
             f"latest {report['latest_batch']}; {report['fences']} fence(s) of takeovers"]
    holder = report.get("holder")
    if holder is not None:
        process = holder["process"]
        state = "let go" if holder["ended"] else f"renewed {holder['renewals']} time(s)"
        lines.append(f"holder: run {holder['run_id']} (epoch {holder['epoch']}, "
                     f"{holder['purpose']}, pid {process['pid']} on {process['host']}), "
                     f"{state}; lease {holder['lease_seconds']:g} s")
    lines.extend(format_layouts(report.get("layouts", [])))
    for store_id, store in report["stores"].items():
        lines.append(f"store {store_id}: {store['changelog_files']} changelog file(s) "
                     f"{store['changelog_bytes']} B, {store['snapshots']} snapshot(s), "
                     f"{store['data_files']} data file(s) {store['data_bytes']} B")
        committed = store.get("committed")
        if committed:
            lines.append(f"  committed version {committed['version']} id "
                         f"{committed['unique_id']} on snapshot {committed['snapshot']}; "
                         f"lineage {' -> '.join(committed['lineage']) or '(none)'}; "
                         f"changelog {committed['changelog_bytes']} B in "
                         f"{committed['changelog_files']} file(s); pending snapshot "
                         f"{committed['pending_snapshot']}")
        for version, ids in store["versions"].items():
            uncommitted = "".join(f", {uid} (uncommitted: not a checkpoint)"
                                  for uid in ids["uncommitted"])
            changelog = (", ".join(ids["changelog"]) + uncommitted).lstrip(", ") or "-"
            lines.append(f"  v{version}: changelog {changelog}; "
                         f"snapshot {', '.join(ids['snapshot']) or '-'}")
        lines.extend(f"  unexpected file {path}" for path in store["other_files"])
    lines.extend(format_schema_records(report.get("state_schemas", {})))
    lines.extend(f"problem: {problem}" for problem in report["problems"])
    return "\n".join(lines)
