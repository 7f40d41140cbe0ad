"""`inspect`: what a checkpoint root holds, per store: versions, lineage, sizes, files."""

from __future__ import annotations

from typing import Any

from pyspark_dstl.backend.errors import CommitLogError
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.listing import StoreDirListing, list_stores
from pyspark_dstl.materializer.remote import RemoteFiles


def inspect_checkpoint(storage: RemoteFiles) -> dict[str, Any]:
    """A JSON-safe description of the root (the CLI prints it as text or JSON)."""
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
        stores[store_id] = _describe(listing)
        info = infos.get(store_id)
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
            "latest_batch": latest_batch, "stores": stores, "problems": problems}


def _describe(listing: StoreDirListing) -> dict[str, Any]:
    versions: dict[int, dict[str, list[str]]] = {}
    for name, _ in listing.changelogs:
        ids = versions.setdefault(name.version, {"changelog": [], "snapshot": []})["changelog"]
        if name.unique_id not in ids:
            ids.append(name.unique_id)
    for name, _ in listing.manifests:
        versions.setdefault(name.version, {"changelog": [], "snapshot": []})[
            "snapshot"].append(name.unique_id)
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
             f"latest {report['latest_batch']}"]
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
            lines.append(f"  v{version}: changelog {', '.join(ids['changelog']) or '-'}; "
                         f"snapshot {', '.join(ids['snapshot']) or '-'}")
        lines.extend(f"  unexpected file {path}" for path in store["other_files"])
    lines.extend(f"problem: {problem}" for problem in report["problems"])
    return "\n".join(lines)
