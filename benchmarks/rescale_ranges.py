"""Rescale by moving key-group ranges instead of keys: what it would cost, measured with the
parts the backend has (rocksdict's Checkpoint, delete_range, SstFileWriter,
ingest_external_file, live_files, iterators), before any stored layout changes.

The data is benchmarks/rescale.py's (its generator and builder): `keys` bigint keys, 100 random
bytes per value, `from` partitions, each store one snapshot on file://. In the range layout a
key's key group is pmod(Spark's hash, G) with G = KEY_GROUPS, partition p of P owns the
contiguous groups [ceil(p*G/P), ceil((p+1)*G/P)) (Flink's assignment), and the stored key is the
2-byte big-endian key group followed by the msgpack key (inside the store's column prefix).
Alternating in every round, each from a cold local directory:
- restore: every old store loaded at its checkpoint through the backend's own restore path
  (snapshot files fetched, verified and linked, RocksDB opened), two at a time;
- range rescale to `to` partitions, twice (copy by iterator + WriteBatch, and by
  SstFileWriter + ingest_external_file): fetch = every old store restored as above, once;
  then per new partition p, two at a time: a RocksDB Checkpoint (hard links) of the old store
  with the largest overlap opened as p's store and clipped with delete_range to p's groups
  (checkpoint+clip); the rest of p's groups copied key by key from the other overlapping old
  store (copy); flush; and the snapshot of p uploaded by the materializer's own uploader, told
  that the old store's snapshot files may be named instead of uploaded (SST sharing across
  stores): only p's new files go out (upload). The same upload with no sharing (every live
  file of p, as today's per-store dedup would) is timed apart and not in the total, as is a
  compaction of the clipped ranges afterwards;
- the product's range rescale (backend/ops/range_rescale.py `rescale_ranges`, label
  "ranges product"): the same design end to end as the library runs it (restore of the old
  stores, clone + clip, shares copied as ingested SST files, snapshots whose files shared with
  the base's snapshot are copied in storage into each new store's own folder), its new stores
  committed as snapshots; read back afterwards through the normal restore path (untimed);
- today's rescale (benchmarks/rescale.py's, on an equal checkpoint in today's layout) and the
  restore of that checkpoint, unless --no-today.
Afterwards every new store is read whole: every input key must be in exactly the partition its
key group assigns, nothing else, and a sample of values must equal the input's.

A warm-up round (all of the above, not counted) comes first unless --warmup 0.

    python -m benchmarks.rescale_ranges [--quick] [--keys 1000000] [--rounds 3] [--warmup 1]
        [--no-today]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from rocksdict import (
    Checkpoint,
    IngestExternalFileOptions,
    Rdict,
    ReadOptions,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from benchmarks.harness import Report, parse_args, plan_of, profiled, ratio, scratch, summarize
from benchmarks.rescale import (
    CF,
    NO_SNAPSHOTS,
    OPERATOR,
    VALUE_SIZE,
    Target,
    build,
    generated,
    rescale_all,
    restore_all,
)
from benchmarks.workload import backend_options, file_url
from pyspark_dstl.backend.engines.records import cf_prefix
from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.backend.lineage.checkpoint import CheckpointInfo
from pyspark_dstl.backend.ops.range_rescale import rescale_ranges
from pyspark_dstl.backend.ops.rescale import PARALLEL_LOADS, restore_bytes
from pyspark_dstl.backend.spark.codec.spark_hash import hash_longs
from pyspark_dstl.backend.spark.codec.values import encode_key
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.backend.store.state_store import ChangelogStateStore
from pyspark_dstl.changelog.options import ChangelogOptions
from pyspark_dstl.materializer.checksum import ChecksumCache
from pyspark_dstl.materializer.handle import MaterializedHandle, SnapshotRequest
from pyspark_dstl.materializer.listing import aread_manifest
from pyspark_dstl.materializer.local import take_checkpoint
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.materializer import COUNTERS
from pyspark_dstl.materializer.metrics import Metrics
from pyspark_dstl.materializer.upload.dedup import UploadedFiles
from pyspark_dstl.materializer.upload.uploader import SnapshotUploader

NAME = "rescale_ranges"
FULL: dict[str, Any] = {"keys": 1_000_000, "from": 4, "to": 6, "rounds": 3, "warmup": 1}
QUICK: dict[str, Any] = {"keys": 20_000, "from": 4, "to": 6, "rounds": 1, "warmup": 0}
# Fixed maximum of partitions. 1024 groups: a range is one 2-byte prefix pair whatever the
# count, up to 1024 partitions with at most 1 group (0.1% of the keys) of imbalance between
# two partitions; Flink's default maximum is 1.5x the parallelism rounded up to a power of
# two, at least 128, so 1024 leaves room for several rescales up while keeping per-group
# bookkeeping (a timer queue per group: G/P seeks per firing) small.
KEY_GROUPS = 1024
COPY_CHUNK = 100_000
UPLOAD_PARALLELISM = 4
SAMPLE_VALUES = 200  # per new partition, compared with the input
COPY_MODES = {"batch": "iterator + WriteBatch", "sst": "SstFileWriter + ingest_external_file"}
PHASES = ("fetch", "clip", "copy", "flush", "upload")
PREFIX = cf_prefix(CF)
PRODUCT = "ranges product"
PRODUCT_NAME = "the product's rescale_ranges"
RESCALED = "rescaled"  # the new snapshots' folder under the checkpoint root


# --- the range layout ----------------------------------------------------------------------

def key_groups(numbers: np.ndarray) -> np.ndarray:
    return hash_longs(numbers).astype(np.int64) % KEY_GROUPS


def group_owner(groups: np.ndarray, partitions: int) -> np.ndarray:
    """The partition owning each key group: p with p*G/P <= group < (p+1)*G/P."""
    return groups * partitions // KEY_GROUPS


def group_range(partition: int, partitions: int) -> tuple[int, int]:
    """[lo, hi) of the key groups `partition` of `partitions` owns (group_owner's inverse)."""
    return (-(-partition * KEY_GROUPS // partitions),
            -(-(partition + 1) * KEY_GROUPS // partitions))


def group_key(group: int) -> bytes:
    """The first stored key of `group`; KEY_GROUPS gives the end of the column family's keys."""
    return PREFIX + group.to_bytes(2, "big")


def ranged_layout(numbers: np.ndarray, partitions: int) -> tuple[np.ndarray, list[bytes]]:
    """The range layout for benchmarks.rescale.build: key group first, then the msgpack key."""
    groups = key_groups(numbers)
    return group_owner(groups, partitions), [
        encode_key([int(n)], int(g))
        for g, n in zip(groups.tolist(), numbers.tolist(), strict=True)]


def pieces(partition: int, old: int, new: int) -> list[tuple[int, int, int]]:
    """(old partition, lo, hi) of every old store holding part of new `partition`'s groups,
    the largest overlap first (that store is cloned; the others are copied from)."""
    lo, hi = group_range(partition, new)
    found = []
    for source in range(old):
        a, b = group_range(source, old)
        if max(lo, a) < min(hi, b):
            found.append((source, max(lo, a), min(hi, b)))
    return sorted(found, key=lambda piece: (piece[1] - piece[2], piece[0]))


# --- the range rescale ---------------------------------------------------------------------

class OldStore:
    """One old store restored by the backend and held open, with its snapshot's manifest."""

    def __init__(self, store: ChangelogStateStore, manifest: SnapshotManifest) -> None:
        self.store = store
        self.manifest = manifest
        # the benchmark reaches the open RocksDB the store restored (no public accessor)
        self.engine = store._instance.engine

    @property
    def db(self) -> Rdict:
        with self.engine.rocksdb_view() as db:
            return db


def no_wal() -> WriteOptions:
    options = WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign,assignment]
    return options


def fetch(backend: StateBackend, target: Target,
          infos: dict[int, CheckpointInfo]) -> dict[int, OldStore]:
    """Every old store restored once, as many at once as a restore of all of them."""
    storage = backend.context(target.url).storage

    def load(item: tuple[int, CheckpointInfo]) -> tuple[int, OldStore]:
        partition, info = item
        store = backend.provider(target.url, OPERATOR, partition).get_store(info.version, info)
        assert isinstance(store, ChangelogStateStore) and info.materialized is not None
        manifest = storage.loop.run(aread_manifest(storage, info.materialized.manifest_path))
        return partition, OldStore(store, manifest)

    with ThreadPoolExecutor(PARALLEL_LOADS) as pool:
        return dict(pool.map(load, sorted(infos.items())))


def clone_and_clip(source: OldStore, directory: str, settings: RocksDBSettings,
                   lo: int, hi: int) -> Rdict:
    """A RocksDB checkpoint of `source` (hard links) opened as a store of its own, with every
    key outside groups [lo, hi) deleted by two range tombstones (no key is read)."""
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    Checkpoint(source.db).create_checkpoint(directory)
    db = Rdict(directory, settings.options(create=False))
    db.set_write_options(no_wal())
    db.delete_range(group_key(0), group_key(lo))
    db.delete_range(group_key(hi), group_key(KEY_GROUPS))
    return db


def source_chunks(source: OldStore, lo: int, hi: int) -> Iterator[list[tuple[bytes, bytes]]]:
    options = ReadOptions()
    options.set_iterate_upper_bound(group_key(hi))
    items = source.db.items(from_key=group_key(lo), read_opt=options)
    try:
        while chunk := list(islice(items, COPY_CHUNK)):
            yield chunk  # type: ignore[misc]
    finally:
        del items  # a live iterator keeps the DB lock after close()


def copy_by_batch(db: Rdict, source: OldStore, lo: int, hi: int) -> int:
    copied = 0
    for chunk in source_chunks(source, lo, hi):
        batch = WriteBatch(raw_mode=True)
        for key, value in chunk:
            batch.put(key, value)
        db.write(batch)
        copied += len(chunk)
    return copied


def copy_by_sst(db: Rdict, source: OldStore, lo: int, hi: int, settings: RocksDBSettings,
                path: str) -> int:
    writer = SstFileWriter(settings.options())
    writer.open(path)
    copied = 0
    for chunk in source_chunks(source, lo, hi):
        for key, value in chunk:
            writer[key] = value
        copied += len(chunk)
    if not copied:
        return 0
    writer.finish()
    ingest = IngestExternalFileOptions()
    ingest.set_move_files(True)
    db.ingest_external_file([path], ingest)
    return copied


class Uploads:
    """The materializer's own uploader, driven per new store: `shared` tells it which remote
    files of the old store's snapshot a new snapshot may name instead of uploading (what the
    backend does today for one store's consecutive snapshots, across stores)."""

    def __init__(self, backend: StateBackend, target: Target) -> None:
        self.storage = backend.context(target.url).storage
        self.checksums = ChecksumCache()
        self.metrics = Metrics(COUNTERS)

    def remember(self, source: OldStore) -> None:
        """The restore verified these files' checksums (the backend's restore does the same)."""
        for file in source.manifest.files:
            path = os.path.join(source.engine.path, file.local_name)
            if os.path.exists(path):
                self.checksums.remember(path, file.checksum)

    def upload(self, db: Rdict, directory: str, store_id: str, version: int,
               shared: OldStore | None) -> tuple[MaterializedHandle, float]:
        began = time.perf_counter()
        checkpoint = take_checkpoint(db, directory)
        uploaded = UploadedFiles()
        if shared is not None:
            for file in shared.manifest.files:
                uploaded.add(store_id, file.key, file.dfs_path)
        uploader = SnapshotUploader(self.storage, uploaded, self.checksums, self.metrics,
                                    UPLOAD_PARALLELISM)
        handle = uploader.upload(checkpoint, SnapshotRequest(store_id, version,
                                                             uuid.uuid4().hex, 0), store_id)
        checkpoint.remove()
        return handle, time.perf_counter() - began


def range_rescale(target: Target, infos: dict[int, CheckpointInfo], plan: dict[str, Any],
                  mode: str, local: Path) -> tuple[dict[str, Any], dict[int, Rdict], list[Any]]:
    """The range design end to end; returns its figures and the new stores (open) for
    verification, with what must be closed after. The new partitions are made as many at
    once as the restore loads (phase seconds are summed over them)."""
    options = backend_options(local / "old", target.options, NO_SNAPSHOTS)
    settings = RocksDBSettings.from_options(options)
    after = max(info.version for info in infos.values())
    run = uuid.uuid4().hex[:8]
    backend = StateBackend(options)
    began = time.perf_counter()
    olds = fetch(backend, target, infos)
    fetched = time.perf_counter() - began
    uploads = Uploads(backend, target)
    for source in olds.values():
        uploads.remember(source)

    def make(partition: int) -> tuple[dict[str, Any], Rdict]:
        (base, _, _), *others = pieces(partition, plan["from"], plan["to"])
        lo, hi = group_range(partition, plan["to"])
        seconds: dict[str, Any] = {}
        clock = time.perf_counter()
        db = clone_and_clip(olds[base], str(local / "new" / str(partition)), settings, lo, hi)
        seconds["clip"], clock = time.perf_counter() - clock, time.perf_counter()
        copied = 0
        for index, (source, a, b) in enumerate(others):
            if mode == "batch":
                copied += copy_by_batch(db, olds[source], a, b)
            else:
                copied += copy_by_sst(db, olds[source], a, b, settings,
                                      str(local / "new" / f"copy-{partition}-{index}.sst"))
        seconds["copy"], clock = time.perf_counter() - clock, time.perf_counter()
        db.flush()
        seconds["flush"] = time.perf_counter() - clock
        handle, seconds["upload"] = uploads.upload(
            db, str(local / "snapshots" / f"{partition}-shared"),
            f"{RESCALED}/ranges-{mode}-{run}/{partition}", after + 1, olds[base])
        live = _live(db)
        return {**seconds, "keys_copied": copied, "bytes_written": handle.incremental_bytes,
                "bytes_referenced": handle.total_bytes,
                "files_new": sum(1 for f in live if f not in _names(olds[base])),
                "files_shared": sum(1 for f in live if f in _names(olds[base]))}, db

    with ThreadPoolExecutor(PARALLEL_LOADS) as pool:
        made = list(pool.map(make, range(plan["to"])))
    result: dict[str, Any] = {"seconds": time.perf_counter() - began,
                              "bytes_read": sum(restore_bytes(i) for i in infos.values()),
                              "fetch_seconds": fetched}
    for name in ("clip", "copy", "flush", "upload"):
        result[f"{name}_seconds"] = sum(figures[name] for figures, _ in made)
    for name in ("keys_copied", "bytes_written", "bytes_referenced", "files_new",
                 "files_shared"):
        result[name] = sum(figures[name] for figures, _ in made)
    for source in olds.values():
        source.store.abort()
    new_dbs = {partition: db for partition, (_, db) in enumerate(made)}
    # apart, not in the time above: the same snapshots without sharing (every live file)
    result["unshared_upload_seconds"] = 0.0
    result["unshared_bytes_written"] = 0
    for partition, db in new_dbs.items():
        handle, took = uploads.upload(db, str(local / "snapshots" / f"{partition}-all"),
                                      f"{RESCALED}/unshared-{mode}-{run}/{partition}",
                                      after + 1, None)
        result["unshared_upload_seconds"] += took
        result["unshared_bytes_written"] += handle.incremental_bytes
    return result, new_dbs, [backend]


def _live(db: Rdict) -> list[str]:
    return [str(f["name"]).lstrip("/") for f in db.live_files()]


def _names(source: OldStore) -> set[str]:
    return {file.local_name for file in source.manifest.files}


# --- verification ----------------------------------------------------------------------------

def expected_values(keys: int, seed: int, partitions: int,
                    rng: np.random.Generator) -> dict[int, dict[bytes, bytes]]:
    """A sample of each new partition's stored keys with their input values."""
    chosen = np.sort(rng.choice(keys, size=min(keys, SAMPLE_VALUES * partitions * 4),
                                replace=False))
    samples: dict[int, dict[bytes, bytes]] = {p: {} for p in range(partitions)}
    for numbers, blob in generated(keys, seed):
        offsets = np.flatnonzero(np.isin(numbers, chosen))
        owners, stored = ranged_layout(numbers[offsets], partitions)
        for offset, owner, key in zip(offsets.tolist(), owners.tolist(), stored, strict=True):
            if len(samples[owner]) < SAMPLE_VALUES:
                samples[owner][PREFIX + key] = blob[offset * VALUE_SIZE:
                                                    (offset + 1) * VALUE_SIZE]
    return samples


def verify(dbs: dict[int, Rdict], keys: int, partitions: int,
           samples: dict[int, dict[bytes, bytes]]) -> dict[str, Any]:
    """Every input key exactly once, in the partition its key group assigns; nothing else;
    the sampled values equal. Raises AssertionError naming the first difference."""
    found: list[np.ndarray] = []
    counts = {}
    for partition, db in sorted(dbs.items()):
        lo, hi = group_range(partition, partitions)
        numbers = []
        groups = []
        stored = db.keys()  # Rust-side iteration of every key, range tombstones applied
        for key in stored:
            if not key.startswith(PREFIX):
                raise AssertionError(f"partition {partition}: key {key!r} outside {CF!r}")
            groups.append(int.from_bytes(key[len(PREFIX):len(PREFIX) + 2], "big"))
            numbers.append(msgpack.unpackb(key[len(PREFIX) + 2:])[0])
        numbers_array = np.asarray(numbers, dtype=np.int64)
        stored_groups = np.asarray(groups, dtype=np.int64)
        if len(numbers_array) and not np.array_equal(key_groups(numbers_array), stored_groups):
            raise AssertionError(f"partition {partition}: a key under another key group")
        if len(numbers_array) and not ((stored_groups >= lo) & (stored_groups < hi)).all():
            raise AssertionError(f"partition {partition}: a key outside groups [{lo}, {hi})")
        for key, value in samples[partition].items():
            if db.get(key) != value:
                raise AssertionError(f"partition {partition}: key {key!r} has another value")
        counts[partition] = len(numbers_array)
        found.append(numbers_array)
    every = np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    if not np.array_equal(every, np.arange(keys, dtype=np.int64)):
        raise AssertionError(f"{len(every)} key(s) found, {len(np.unique(every))} distinct; "
                             f"expected each of 0..{keys - 1} once")
    return {"keys": len(every), "keys_per_partition": counts,
            "values_checked": sum(len(s) for s in samples.values()), "passed": True}


# --- the run ---------------------------------------------------------------------------------

def run(args: argparse.Namespace, plan: dict[str, Any], work: Path,
        today: bool) -> dict[str, list[dict[str, Any]]]:
    target = Target("file", file_url(work / "remote"), ChangelogOptions())
    began = time.perf_counter()
    ranged = build(target, plan["keys"], plan["from"], args.seed, work / "build-ranged",
                   ranged_layout)
    print(f"  built {plan['keys']:,} keys over {plan['from']} partitions (range layout) in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    plain: dict[int, CheckpointInfo] = {}
    today_target = Target("file", file_url(work / "remote-today"), ChangelogOptions())
    if today:
        began = time.perf_counter()
        plain = build(today_target, plan["keys"], plan["from"], args.seed, work / "build-today")
        print(f"  built the same keys in today's layout in {time.perf_counter() - began:.1f} s",
              flush=True)
    samples = expected_values(plan["keys"], args.seed, plan["to"],
                              np.random.default_rng(args.seed + 1))
    labels = ["restore", *(f"ranges {mode}" for mode in COPY_MODES), PRODUCT]
    if today:
        labels += ["restore (today's layout)", "today"]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for number in range(-plan["warmup"], plan["rounds"]):
        shift = number % len(labels)
        measured: dict[str, dict[str, Any]] = {}
        for label in labels[shift:] + labels[:shift]:
            with scratch(args, label.split()[0]) as local:
                if label == "restore":
                    measured[label] = restore_all(target, ranged, local)
                elif label == "restore (today's layout)":
                    measured[label] = restore_all(today_target, plain, local)
                elif label == "today":
                    measured[label] = rescale_all(today_target, plain, plan["to"], local)
                elif label == PRODUCT:
                    measured[label] = measure_product(target, ranged, plan, local, samples)
                else:
                    measured[label] = measure_ranges(target, ranged, plan, label, local,
                                                     samples)
        line = ", ".join(f"{label} {measured[label]['seconds']:.2f} s" for label in labels)
        if number < 0:
            print(f"  warm-up round (not counted): {line}", flush=True)
            continue
        for label, value in measured.items():
            results[label].append(value)
        print(f"  round {number + 1}/{plan['rounds']}: {line}", flush=True)
    return results


def measure_ranges(target: Target, infos: dict[int, CheckpointInfo], plan: dict[str, Any],
                   label: str, local: Path,
                   samples: dict[int, dict[bytes, bytes]]) -> dict[str, Any]:
    """One range rescale timed, then its new stores verified (untimed) and closed."""
    mode = label.split()[1]
    result, dbs, backends = range_rescale(target, infos, plan, mode, local)
    try:
        began = time.perf_counter()
        result["verified"] = verify(dbs, plan["keys"], plan["to"], samples)
        result["verify_seconds"] = time.perf_counter() - began
        result.update(compact(dbs, plan["to"]))
    finally:
        for db in dbs.values():
            db.close()
        for backend in backends:
            backend.close()
    # the new snapshots' files: kept to one rescale's worth on disk
    shutil.rmtree(Path(target.url.removeprefix("file://")) / RESCALED, ignore_errors=True)
    return result


def measure_product(target: Target, infos: dict[int, CheckpointInfo], plan: dict[str, Any],
                    local: Path, samples: dict[int, dict[bytes, bytes]]) -> dict[str, Any]:
    """The product's rescale_ranges timed; then its new stores restored through the normal
    path and verified like the hand-rolled ones (untimed), and their files removed."""
    options = backend_options(local / "product", target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    made, stats = rescale_ranges(options, target.url, OPERATOR, infos, plan["to"], KEY_GROUPS,
                                 lambda cf: 0)
    result: dict[str, Any] = {"seconds": time.perf_counter() - began, **stats.to_dict()}
    with StateBackend(backend_options(local / "check", target.options, NO_SNAPSHOTS)) as check:
        stores = {p: check.provider(target.url, OPERATOR, p).get_store(info.version, info)
                  for p, info in made.items()}
        try:
            began = time.perf_counter()
            dbs = {}
            for p, store in stores.items():
                assert isinstance(store, ChangelogStateStore)
                with store._instance.engine.rocksdb_view() as db:
                    dbs[p] = db
            result["verified"] = verify(dbs, plan["keys"], plan["to"], samples)
            result["verify_seconds"] = time.perf_counter() - began
        finally:
            for store in stores.values():
                store.abort()
        storage = check.context(target.url).storage
        for info in made.values():  # one rescale's worth on disk: the new snapshots go
            assert info.materialized is not None
            manifest = storage.loop.run(aread_manifest(storage, info.materialized.manifest_path))
            storage.delete_many([*(f.dfs_path for f in manifest.files),
                                 info.materialized.manifest_path])
    return result


def compact(dbs: dict[int, Rdict], partitions: int) -> dict[str, Any]:
    """What dropping the clipped keys from the shared old files costs (after the rescale, not
    in it): a manual compaction of each new store's deleted ranges."""
    began = time.perf_counter()
    for partition, db in dbs.items():
        lo, hi = group_range(partition, partitions)
        db.compact_range(group_key(0), group_key(lo))
        db.compact_range(group_key(hi), group_key(KEY_GROUPS))
    return {"compact_seconds": time.perf_counter() - began,
            "bytes_after_compaction": sum(int(f["size"]) for db in dbs.values()
                                          for f in db.live_files())}


def round_rows(results: dict[str, list[dict[str, Any]]]) -> list[list[Any]]:
    """Every round of every range rescale against the restore of the same round."""
    rows = []
    for number, restore in enumerate(results["restore"]):
        for mode in COPY_MODES:
            run = results[f"ranges {mode}"][number]
            rows.append([number + 1, mode, run["seconds"], restore["seconds"],
                         ratio(run["seconds"], restore["seconds"]), run["bytes_read"] / 1e6,
                         run["bytes_written"] / 1e6,
                         *(run[f"{phase}_seconds"] for phase in PHASES), run["keys_copied"]])
    return rows


def product_rows(results: dict[str, list[dict[str, Any]]]) -> list[list[Any]]:
    """Every round of the product's rescale against the restore of the same round."""
    rows = []
    for number, restore in enumerate(results["restore"]):
        run = results[PRODUCT][number]
        rows.append([number + 1, run["seconds"], restore["seconds"],
                     ratio(run["seconds"], restore["seconds"]), run["bytes_read"] / 1e6,
                     run["bytes_uploaded"] / 1e6, run["bytes_copied"] / 1e6,
                     run["files_shared"], run["load_seconds"], run["clip_seconds"],
                     run["copy_seconds"], run["write_seconds"], run["keys_copied"]])
    return rows


ROUND_TITLE = ("Range rescale per round: seconds, against that round's restore; phases as "
               "below (after fetch, summed over the partitions made at once)")
ROUND_HEADERS = ["round", "copy", "s", "restore s", "vs restore", "read MB", "written MB",
                 *(f"{phase} s" for phase in PHASES), "keys copied"]


def _written(run: dict[str, Any]) -> int:
    """Bytes a variant sent to storage (the product's copies in storage are not sent)."""
    return int(run.get("bytes_uploaded", run.get("bytes_written", 0)))


def tabulate(report: Report, results: dict[str, list[dict[str, Any]]],
             plan: dict[str, Any]) -> None:
    restore = summarize([r["seconds"] for r in results["restore"]])
    rows = []
    for label, rounds in results.items():
        timed = summarize([r["seconds"] for r in rounds])
        base = (summarize([r["seconds"] for r in results["restore (today's layout)"]])
                if label == "today" else restore)
        shown = "today (vs its layout's restore)" if label == "today" else label
        rows.append([shown, timed["n"], timed["p50"], timed["min"], timed["max"],
                     rounds[0]["bytes_read"] / 1e6, _written(rounds[0]) / 1e6,
                     ratio(timed["p50"], base["p50"])])
    report.table(f"Range rescale {plan['from']} -> {plan['to']} vs restore on file:// of "
                 f"{plan['keys']:,} keys (G = {KEY_GROUPS} key groups)",
                 ["operation", "n", "p50 s", "min s", "max s", "read MB", "written MB",
                  "time vs restore"], rows)
    report.table(ROUND_TITLE, ROUND_HEADERS, round_rows(results))
    report.table("The product's rescale_ranges per round, against that round's restore: "
                 "uploaded = sent by the client, copied = copied in storage (the base's "
                 "snapshot files, into each new store's folder); phases summed over the "
                 "partitions made at once (load in the background)",
                 ["round", "s", "restore s", "vs restore", "read MB", "uploaded MB",
                  "copied MB", "files copied", "load s", "clip s", "copy s", "commit s",
                  "keys copied"], product_rows(results))
    phase_rows = []
    for mode in COPY_MODES:
        rounds = results[f"ranges {mode}"]
        phase_rows.append([f"ranges {mode}", *(
            summarize([r[f"{phase}_seconds"] for r in rounds])["p50"] for phase in PHASES),
            summarize([r["unshared_upload_seconds"] for r in rounds])["p50"],
            rounds[0]["keys_copied"]])
    report.table(f"Range rescale phases (p50 s; after fetch, summed over {PARALLEL_LOADS} new "
                 "partitions made at once): fetch = restore the old stores; clip = RocksDB "
                 "checkpoint of the base store + 2 delete_range; copy = the other store's "
                 "share key by key; flush; upload = snapshot of the new files only (old SSTs "
                 "named, not uploaded); apart: the upload of every live file (no sharing)",
                 ["variant", *(f"{phase} s" for phase in PHASES), "upload all s",
                  "keys copied"], phase_rows)
    byte_rows = []
    for mode in COPY_MODES:
        rounds = results[f"ranges {mode}"]
        first = rounds[0]
        byte_rows.append([f"ranges {mode}", first["bytes_read"] / 1e6,
                          first["bytes_written"] / 1e6, first["files_new"],
                          first["files_shared"], first["bytes_referenced"] / 1e6,
                          first["unshared_bytes_written"] / 1e6,
                          first["bytes_after_compaction"] / 1e6,
                          summarize([r["compact_seconds"] for r in rounds])["p50"]])
    report.table("Range rescale bytes: read = snapshots fetched; written = new files uploaded "
                 "with sharing; referenced = what the new snapshots name (old SSTs still "
                 "holding the clipped keys until compaction); without sharing every live "
                 "file is uploaded; compaction of the clipped ranges measured apart, after",
                 ["variant", "read MB", "written MB", "new files", "shared files",
                  "referenced MB", "written MB without sharing", "MB after compaction",
                  "compact s"], byte_rows)
    for mode in [*COPY_MODES, "product"]:
        value = ratio(summarize([r["seconds"] for r in results[f"ranges {mode}"]])["p50"],
                      restore["p50"])
        report.goal(f"9. range rescale ({COPY_MODES.get(mode, PRODUCT_NAME)}) {plan['from']} -> "
                    f"{plan['to']} of "
                    f"{plan['keys']:,} keys (file)", "rescale <= 1.5x a restore of the same "
                    "state", f"{value:.2f}x restore", value, value <= 1.5)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--keys"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
        (["--warmup"], {"type": int, "default": None,
                        "help": "rounds run first and not counted (1 by default, 0 in --quick)"}),
        (["--no-today"], {"action": "store_true",
                          "help": "leave out today's rescale (and its layout's restore)"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "rounds"))
    if args.warmup is not None:
        plan["warmup"] = args.warmup
    report = Report(NAME, args, {**plan, "storage": ["file"], "value_bytes": VALUE_SIZE,
                                 "key": "one bigint grouping key", "key_groups": KEY_GROUPS,
                                 "copy_modes": COPY_MODES})
    report.note("restore and fetch use the backend's own restore path (two stores at a "
                "time); the upload is the materializer's own uploader, told it may name the "
                "old store's snapshot files (cross-store sharing, which the backend does not "
                "do today: its cleanup counts references per store)")
    with profiled(args), scratch(args, NAME) as work:
        results = run(args, plan, work, not args.no_today)
    tabulate(report, results, plan)
    verified = [r["verified"] for mode in [*COPY_MODES, "product"]
                for r in results[f"ranges {mode}"]]
    report.note(f"verified {len(verified)} range rescale(s): every key in the partition its "
                f"key group assigns, nothing else, {verified[0]['values_checked']} sampled "
                f"values equal the input")
    report.put("samples", results)
    report.save()


if __name__ == "__main__":
    main()
