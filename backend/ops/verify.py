"""`verify`: read every file of a checkpoint location and check it; one line per problem.

It also counts the attempts that are checkpoints; one whose commit never completed (aborted or
crashed after early uploads) is not a checkpoint and is listed apart, not as a problem, unless
the latest commit builds on it. The same holds for a snapshot manifest that names a file no
longer there while no commit entry adopted it or reports it in flight: a run that lost the location
(or died) can land its manifest after the new holder's cleanup took the files of that upload.
No commit adopts such a manifest (adoption checks every file first), so it is a leftover that
the next cleanup removes, not damage. A present file that differs from its manifest is always
a problem: files are never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, Fence, decode_record
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.completion import status_from_files
from pyspark_dstl.backend.lineage.naming import snapshot_path
from pyspark_dstl.backend.lineage.rules import HeaderMeta
from pyspark_dstl.backend.lineage.store_listing import StoreDirListing, list_stores
from pyspark_dstl.backend.ops.attempts import StorageSource, attempts_of
from pyspark_dstl.backend.ops.schema_report import schema_record_problems
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.files import read_file_log
from pyspark_dstl.materializer.checksum import crc32_of
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from pyspark_dstl.materializer.materializer_errors import MaterializerError
from pyspark_dstl.materializer.remote import RemoteFiles


@dataclass
class VerifyReport:
    """Problems (unreadable or altered files, missing references; empty when sound), the
    attempts that are checkpoints, and those that are not (their commit never completed)."""

    problems: list[str] = field(default_factory=list)
    checkpoints: int = 0
    uncommitted: list[str] = field(default_factory=list)  # "<store>: <v>_<id>: reason"


def verify_checkpoint(storage: RemoteFiles) -> list[str]:
    """Problems found: unreadable or altered files, missing references. Empty when sound."""
    return verify_report(storage).problems


def verify_report(storage: RemoteFiles) -> VerifyReport:
    listings = list_stores(storage)
    present = {info.path for listing in listings.values() for info in listing.all_files}
    report = VerifyReport()
    latest_attempts: set[tuple[str, int, str]] = set()
    needed_manifests: set[str] = set()
    report.problems = _verify_commit_log(storage, present, latest_attempts, needed_manifests)
    # a manifest may name another store's files in place (a rescale's new stores): the data
    # files of every store, each read and checked once
    data_files = DataFiles({info.path: info.size for listing in listings.values()
                            for info in listing.data_files})
    for listing in listings.values():
        _verify_store(storage, listing, report, latest_attempts, needed_manifests, data_files)
    report.problems.extend(_verify_schema_records(storage))
    return report


def _verify_schema_records(storage: RemoteFiles) -> list[str]:
    try:
        latest = CommitLog(storage).latest()
    except BackendError:
        return []  # the commit log's own check reports it
    return schema_record_problems(storage, latest[1] if latest is not None else None)


def _get(storage: RemoteFiles, path: str) -> bytes:
    return storage.loop.run(storage.aget(path))



def _verify_commit_log(storage: RemoteFiles, present: set[str],
                       latest_attempts: set[tuple[str, int, str]],
                       needed_manifests: set[str]) -> list[str]:
    """Every entry and fence decodes; the newest entry names only files that exist (its
    attempts are added to `latest_attempts`: each must be a completed commit). Manifests any
    entry adopted, and those the newest reports in flight, go to `needed_manifests`."""
    problems: list[str] = []
    entries: list[tuple[int, int, CommitEntry]] = []
    for batch_id, gens in CommitLog(storage).generations().items():
        for generation, info in gens:
            try:
                record = decode_record(_get(storage, info.path), info.path)
            except (BackendError, ChangelogError) as exc:
                problems.append(f"commit log {info.path}: {exc}")
                continue
            if isinstance(record, Fence):
                continue
            if record.batch_id != batch_id:
                problems.append(f"commit log {info.path}: holds batch {record.batch_id}")
            entries.append((batch_id, generation, record))
            needed_manifests.update(info.materialized.manifest_path for info in record.infos()
                                    if info.materialized is not None)
    latest_paths: set[str] = set()
    if entries:
        for checkpoint in max(entries, key=lambda item: item[:2])[2].infos():
            if checkpoint.pending_snapshot is not None:
                needed_manifests.add(snapshot_path(checkpoint.store_id,
                                                   *checkpoint.pending_snapshot))
            latest_attempts.update((checkpoint.store_id, v, uid)
                                   for v, uid in checkpoint.lineage)
            latest_paths.update(checkpoint.changelog.paths)
            if checkpoint.materialized is not None:
                latest_paths.add(checkpoint.materialized.manifest_path)
    problems += [f"latest commit references missing file {path}"
                 for path in sorted(latest_paths - present)]
    return problems


@dataclass
class DataFiles:
    """The snapshot data files present under every store directory (path -> size), and
    those already read and checked."""

    sizes: dict[str, int]
    checked: set[str] = field(default_factory=set)


def _verify_store(storage: RemoteFiles, listing: StoreDirListing, report: VerifyReport,
                  latest_attempts: set[tuple[str, int, str]], needed_manifests: set[str],
                  data_files: DataFiles) -> None:
    problems = report.problems
    store_id = listing.store_id
    for attempt in attempts_of(listing).values():
        sqns: list[int] = []
        meta: HeaderMeta | None = None
        broken = False
        for info in attempt.files:
            try:
                read = read_file_log(StorageSource(storage), info.path, store_id)
                logs = {log.log_id: log for log in read.header.logs}
                if store_id not in logs:
                    problems.append(f"changelog {info.path}: no log of store {store_id}")
                    broken = True
                    continue
                meta = HeaderMeta.from_dict(logs[store_id].metadata, info.path)
                if (meta.version, meta.unique_id) != (attempt.version, attempt.unique_id):
                    problems.append(f"changelog {info.path}: header says version "
                                    f"{meta.version} id {meta.unique_id}")
                sqns += [change_set.sqn for _, change_set in read.located]
            except (ChangelogError, BackendError) as exc:
                problems.append(f"changelog {info.path}: {exc}")
                broken = True
        if broken or meta is None:
            continue  # reported above
        status = status_from_files(meta, attempt.newest.path, set(sqns))
        if status.is_checkpoint:
            report.checkpoints += 1
        elif (store_id, attempt.version, attempt.unique_id) in latest_attempts:
            problems.append(f"store {store_id}: the latest commit builds on attempt "
                            f"{attempt.label}, whose commit is not complete: {status.reason}")
        else:
            report.uncommitted.append(f"store {store_id}: {attempt.label}: {status.reason}")
    _verify_manifests(storage, listing, report, needed_manifests, data_files)


def _verify_manifests(storage: RemoteFiles, listing: StoreDirListing, report: VerifyReport,
                      needed_manifests: set[str], data_files: DataFiles) -> None:
    """Every manifest reads and its present files match it; a missing file is a problem when
    a commit needs the manifest, and marks an abandoned upload otherwise (module docstring).
    Needed manifests go first, so a file they share with another is judged as needed."""
    ordered = sorted((info for _, info in listing.manifests),
                     key=lambda info: info.path not in needed_manifests)
    for info in ordered:
        try:
            manifest = storage.loop.run(aread_manifest(storage, info.path))
        except MaterializerError as exc:
            report.problems.append(f"snapshot {info.path}: {exc}")
            continue
        missing = _verify_snapshot_files(storage, info.path, manifest, data_files.sizes,
                                         data_files.checked, report.problems)
        if not missing:
            continue
        if info.path in needed_manifests:
            report.problems += [f"snapshot {info.path}: file {path} is missing"
                                for path in missing]
        else:
            report.uncommitted.append(
                f"store {listing.store_id}: snapshot {info.path}: no commit adopted it and "
                f"{len(missing)} file(s) it names are gone (e.g. {missing[0]}): an upload "
                f"abandoned by a run that lost the location or died; the next cleanup removes it")


def _verify_snapshot_files(storage: RemoteFiles, manifest_path: str, manifest: SnapshotManifest,
                           sizes: dict[str, int], checked: set[str],
                           problems: list[str]) -> list[str]:
    """Appends what is wrong with present files to `problems`; returns the missing ones."""
    missing: list[str] = []
    for file in manifest.files:
        if file.dfs_path not in sizes:
            missing.append(file.dfs_path)
            continue
        if file.dfs_path in checked:
            continue
        checked.add(file.dfs_path)
        if sizes[file.dfs_path] != file.size:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path} has "
                            f"{sizes[file.dfs_path]} bytes, manifest says {file.size}")
            continue
        try:
            data = _get(storage, file.dfs_path)
        except ChangelogError as exc:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path}: {exc}")
            continue
        if crc32_of(data) != file.checksum:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path} fails its "
                            f"checksum (CRC-32 {crc32_of(data):#010x}, manifest "
                            f"{file.checksum:#010x})")
    return missing
