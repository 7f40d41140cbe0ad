"""The range rescale (backend/rescale/ranges.py): new partitions made from key-group ranges
of the old stores (clone + clip of the base, copies of the other shares), their base files
named in place instead of uploaded or copied, and kept by cleanup while any manifest names
them; real RocksDB, real storage on file:// and S3."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pyspark_dstl.backend.backend_errors import ProviderError
from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.ops.verify import verify_checkpoint
from pyspark_dstl.backend.rescale.key_by_key import RescaleError, RescaleStats
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS, group_bytes, groups_at, owner
from pyspark_dstl.backend.rescale.ranges import pieces, rescale_ranges
from pyspark_dstl.backend.store.state_store import ChangelogStateStore
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from tests.support import S3Env
from tests.support.backend import MEMORY, OPERATOR, BackendEnv, entry_of, file_env, s3_env

VALUES = "value/x"
TIMERS = "timers/by_expiry"  # 8-byte expiry, then the key group
KEYS = 1500
Content = dict[str, dict[bytes, bytes]]  # column family -> stored key -> value


def group_offset(cf: str) -> int:
    return 8 if cf == TIMERS else 0


def group_of(cf: str, key: bytes) -> int:
    return int(groups_at([key], group_offset(cf))[0])


def generated(seed: int) -> Content:
    """KEYS value keys (group + payload) and a timer per third key (expiry + group + payload),
    groups drawn over every key group."""
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, KEY_GROUPS, KEYS)
    values: dict[bytes, bytes] = {}
    timers: dict[bytes, bytes] = {}
    for number, group in enumerate(groups.tolist()):
        payload = b"k%06d" % number
        values[group_bytes(group) + payload] = b"v%06d" % number + bytes(rng.bytes(20))
        if number % 3 == 0:
            expiry = int(rng.integers(0, 1 << 40)).to_bytes(8, "big")
            timers[expiry + group_bytes(group) + payload] = b""
    return {VALUES: values, TIMERS: timers}


def split(content: Content, old: int) -> dict[int, Content]:
    """Each old partition's share: the keys whose group it owns."""
    shares: dict[int, Content] = {q: {cf: {} for cf in content} for q in range(old)}
    for cf, items in content.items():
        for key, value in items.items():
            part = int(owner(np.array([group_of(cf, key)]), old, KEY_GROUPS)[0])
            shares[part][cf][key] = value
    return shares


def build(env: BackendEnv, old: int, seed: int = 1,
          with_changelog: frozenset[int] = frozenset({0})) -> tuple[dict[int, StoreCommit],
                                                                     Content]:
    """Old stores 0..old-1 committed as snapshots; those in `with_changelog` then commit a
    batch after it (puts, updates, deletes in both column families) that only the changelog
    holds. Returns their infos and the content they hold together."""
    content = generated(seed)
    backend = env.backend()
    infos: dict[int, StoreCommit] = {}
    for part, share in split(content, old).items():
        store = env.provider(backend, part).get_store(0)
        for cf, items in share.items():
            store.put_many(sorted(items.items()), cf)
        info = store.commit(materialize=True)
        if part in with_changelog:
            store = env.provider(backend, part).get_store(info.version, info)
            info = _later_batch(store, share, content, part, old)
        infos[part] = info
    backend.close()
    return infos, content


def _later_batch(store: ChangelogStateStore, share: Content, content: Content, part: int,
                 old: int) -> StoreCommit:
    for cf in (VALUES, TIMERS):
        keys = sorted(share[cf])
        for key in keys[:5]:  # deleted after the snapshot
            store.remove(key, cf)
            del content[cf][key]
        for key in keys[5:10]:  # updated after the snapshot
            store.put(key, b"updated", cf)
            content[cf][key] = b"updated"
    groups = [g for g in range(KEY_GROUPS) if g * old // KEY_GROUPS == part]
    for number, group in enumerate(groups[::max(1, len(groups) // 20)]):
        key = group_bytes(group) + b"replayed%03d" % number
        store.put(key, b"only in the changelog", VALUES)
        content[VALUES][key] = b"only in the changelog"
        timer = (123 + number).to_bytes(8, "big") + key
        store.put(timer, b"", TIMERS)
        content[TIMERS][timer] = b""
    return store.commit()


def read_back(env: BackendEnv, infos: dict[int, StoreCommit]) -> dict[int, Content]:
    """Every new store restored by the normal path (get_store on its info), read whole."""
    backend = env.backend()
    found: dict[int, Content] = {}
    for part, info in infos.items():
        store = env.provider(backend, part).get_store(info.version, info)
        found[part] = {cf: dict(store.iterator(cf)) for cf in (VALUES, TIMERS)}
        store.abort()
    backend.close()
    return found


def rescale(env: BackendEnv, infos: dict[int, StoreCommit],
            partitions: int) -> tuple[dict[int, StoreCommit], RescaleStats]:
    return rescale_ranges(env.options(local_dir=os.path.join(env.local_dir, "rescale")),
                          env.url, OPERATOR, infos, partitions, KEY_GROUPS, group_offset)


def assert_owned(found: dict[int, Content], content: Content, cf: str, partitions: int) -> None:
    """Every key of `cf` in exactly the partition owning its group, with its value."""
    merged: dict[bytes, bytes] = {}
    for part, stores in found.items():
        keys = list(stores[cf])
        assert (owner(groups_at(keys, group_offset(cf)), partitions, KEY_GROUPS) == part).all()
        assert not set(keys) & set(merged), f"partition {part}: a key also in another"
        merged.update(stores[cf])
    assert merged == content[cf]


def manifest_of(env: BackendEnv, info: StoreCommit) -> SnapshotManifest:
    assert info.materialized is not None
    storage = env.storage
    return storage.loop.run(aread_manifest(storage, info.materialized.manifest_path))


def fingerprint(env: BackendEnv) -> dict[str, str]:
    """Every file of the root with a digest of its bytes."""
    return {path: hashlib.sha256(env.storage.get(path)).hexdigest() for path in env.paths()}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


# --- where keys land ----------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), [(3, 7), (7, 2), (4, 4), (1, 3), (5, 1)],
                         ids=["3to7", "7to2", "4to4", "1to3", "5to1"])
def test_every_value_key_lands_in_the_partition_owning_its_group_nothing_added_or_lost(
        env: BackendEnv, old: int, new: int) -> None:
    infos, content = build(env, old)
    made, _ = rescale(env, infos, new)
    assert sorted(made) == list(range(new))
    assert_owned(read_back(env, made), content, VALUES, new)


@pytest.mark.parametrize(("old", "new"), [(3, 7), (7, 2)], ids=["3to7", "7to2"])
def test_every_timer_lands_by_the_group_after_its_expiry(env: BackendEnv, old: int,
                                                         new: int) -> None:
    infos, content = build(env, old)
    made, _ = rescale(env, infos, new)
    assert_owned(read_back(env, made), content, TIMERS, new)


def test_a_store_made_from_an_old_store_with_changelog_keeps_its_replayed_changes(
        env: BackendEnv) -> None:
    infos, content = build(env, 2, with_changelog=frozenset({0, 1}))
    assert all(info.changelog.size > 0 for info in infos.values())
    made, _ = rescale(env, infos, 2)  # each new store is a clone of the same old one
    found = read_back(env, made)
    replayed = {k for k, v in content[VALUES].items() if v == b"only in the changelog"}
    assert replayed and replayed <= set(found[0][VALUES]) | set(found[1][VALUES])
    assert_owned(found, content, VALUES, 2)
    assert_owned(found, content, TIMERS, 2)


def test_new_stores_are_numbered_after_the_newest_old_version_with_fresh_ids(
        env: BackendEnv) -> None:
    infos, _ = build(env, 3, with_changelog=frozenset({1}))
    made, _ = rescale(env, infos, 4)
    newest = max(info.version for info in infos.values())
    assert {info.version for info in made.values()} == {newest + 1}
    assert all(info.base_unique_id is None and info.materialized is not None
               for info in made.values())
    old_ids = {info.unique_id for info in infos.values()}
    assert len({info.unique_id for info in made.values()} | old_ids) == len(made) + len(infos)


def test_an_old_store_without_a_snapshot_is_rescaled_from_its_changelog(
        env: BackendEnv) -> None:
    content = generated(3)
    backend = env.backend()
    infos: dict[int, StoreCommit] = {}
    for part, share in split(content, 2).items():
        store = env.provider(backend, part).get_store(0)
        for cf, items in share.items():
            store.put_many(sorted(items.items()), cf)
        infos[part] = store.commit()
    backend.close()
    assert all(info.materialized is None for info in infos.values())
    made, stats = rescale(env, infos, 3)
    assert stats.bytes_shared == 0  # no old snapshot to share
    found = read_back(env, made)
    assert_owned(found, content, VALUES, 3)
    assert_owned(found, content, TIMERS, 3)


def test_sources_that_are_not_partitions_0_to_n_are_refused_naming_the_fix(
        env: BackendEnv) -> None:
    infos, _ = build(env, 3, with_changelog=frozenset())
    del infos[1]
    with pytest.raises(RescaleError, match=re.escape("old partitions 0..n-1, got [0, 2]")):
        rescale(env, infos, 2)


def test_a_provider_whose_engine_has_no_rocksdb_files_refuses_naming_the_fix(
        tmp_path: Path) -> None:
    rocksdb_env = file_env(tmp_path)
    try:
        infos, _ = build(rocksdb_env, 2, with_changelog=frozenset())
        options = rocksdb_env.options(provider_class=MEMORY,
                                      local_dir=os.path.join(rocksdb_env.local_dir, "rescale"))
        with pytest.raises(ProviderError, match="use the RocksDB provider"):
            rescale_ranges(options, rocksdb_env.url, OPERATOR, infos, 3, KEY_GROUPS,
                           group_offset)
    finally:
        rocksdb_env.close()


def test_old_stores_leave_the_local_disk_once_no_new_partition_needs_them(
        env: BackendEnv) -> None:
    infos, content = build(env, 8, with_changelog=frozenset())
    local = Path(env.local_dir) / "rescale"
    held: list[int] = []

    def watching(cf: str) -> int:  # called while partitions are made: count the old stores
        held.append(len(list(local.glob("rescale-ranges-*/old/*/stores/agg/*"))))
        return group_offset(cf)

    made, _ = rescale_ranges(env.options(local_dir=str(local)), env.url, OPERATOR, infos, 8,
                             KEY_GROUPS, watching)
    assert held and 0 < max(held) < 8  # never all eight restored at once
    assert_owned(read_back(env, made), content, VALUES, 8)


# --- what is stored -----------------------------------------------------------------------------


def test_old_stores_files_and_manifests_stay_unchanged(env: BackendEnv) -> None:
    infos, _ = build(env, 3)
    before = fingerprint(env)
    rescale(env, infos, 5)
    after = fingerprint(env)
    assert {path: after[path] for path in before} == before


def test_new_stores_name_the_base_stores_files_in_place_nothing_copied(
        env: BackendEnv) -> None:
    infos, _ = build(env, 2, with_changelog=frozenset())
    before = set(env.paths())
    made, stats = rescale(env, infos, 3)
    shared = 0
    for part, info in made.items():
        base = pieces(part, 3, 2, KEY_GROUPS)[0].source
        base_files = {f.key: f.dfs_path for f in manifest_of(env, infos[base]).files}
        for file in manifest_of(env, info).files:
            if file.key in base_files:
                assert file.dfs_path == base_files[file.key]  # the base's own path
                shared += file.size
            else:
                assert file.dfs_path.startswith(store_dir(info.store_id) + "/"), file.dfs_path
    added = set(env.paths()) - before
    assert not [path for path in added if "/sst/" in path
                and env.storage.get(path) in {env.storage.get(p) for p in before}]
    assert stats.files_shared > 0 and stats.bytes_shared == shared > 0
    assert stats.bytes_uploaded + stats.bytes_shared == stats.bytes_written


@pytest.mark.s3
def test_on_s3_the_base_files_are_neither_sent_again_nor_copied(
        s3: S3Env, tmp_path: Path) -> None:
    made_env = s3_env(s3, tmp_path)
    try:
        infos, content = build(made_env, 2, with_changelog=frozenset({1}))
        s3.proxy.reset_log()
        made, stats = rescale(made_env, infos, 3)
        data_puts = [r for r in s3.proxy.records("PUT", "/state/")
                     if not r.path.endswith(".snapshot")]  # manifests aside
        assert stats.files_shared > 0 and stats.bytes_shared > 0
        assert sum(r.bytes_in for r in data_puts) == stats.bytes_uploaded
        old_paths = {f.dfs_path for info in infos.values()
                     for f in manifest_of(made_env, info).files}
        new_files = {f.dfs_path for info in made.values()
                     for f in manifest_of(made_env, info).files}
        assert len(data_puts) == len(new_files - old_paths)  # no copy requests either
        assert stats.bytes_uploaded + stats.bytes_shared == stats.bytes_written
        assert_owned(read_back(made_env, made), content, VALUES, 3)
    finally:
        made_env.close()


# --- cleanup, verify and the orphan scan across stores -------------------------------------------


def rescaled_root(env: BackendEnv, old: int, new: int) -> tuple[dict[int, StoreCommit],
                                                                Content]:
    """Old stores committed at batch 1, rescaled to `new` partitions at batch 2."""
    infos, content = build(env, old)
    env.commit_log().write(1, entry_of(1, *infos.values(), partitions=old))
    made, _ = rescale(env, infos, new)
    env.commit_log().write(2, entry_of(2, *made.values(), partitions=new))
    return made, content


def named_files(env: BackendEnv, infos: dict[int, StoreCommit]) -> set[str]:
    return {f.dfs_path for info in infos.values() for f in manifest_of(env, info).files}


def clean(env: BackendEnv) -> None:
    cleanup_checkpoint(env.storage, 1, dry_run=False, incomplete_grace=0, lease=env.lease())


def test_cleanup_keeps_an_old_stores_files_while_another_stores_manifest_names_them(
        env: BackendEnv) -> None:
    made, content = rescaled_root(env, 3, 5)
    named = named_files(env, made)
    foreign = {path for part, info in made.items() for path in named_files(env, {part: info})
               if not path.startswith(store_dir(info.store_id) + "/")}
    assert foreign  # new stores name files of other store directories
    clean(env)  # batch 1 leaves retention: the old stores' manifests go
    assert named <= set(env.paths())
    assert verify_checkpoint(env.storage) == []
    assert_owned(read_back(env, made), content, VALUES, 5)
    assert_owned(read_back(env, made), content, TIMERS, 5)


def test_cleanup_deletes_old_files_that_no_kept_manifest_of_any_store_names(
        env: BackendEnv) -> None:
    made, content = rescaled_root(env, 4, 2)  # old 1 and 3 are copied as keys, not named
    named = named_files(env, made)
    clean(env)
    cleaned = tuple(store_dir(info.store_id) + "/sst/" for info in made.values())
    left = {path for path in env.paths() if path.startswith(cleaned)}
    assert left == {path for path in named if path.startswith(cleaned)}
    assert any(path.startswith(store_dir(made[1].store_id)) for path in left)
    assert verify_checkpoint(env.storage) == []
    assert_owned(read_back(env, made), content, VALUES, 2)


def test_manifests_of_a_store_no_retained_entry_names_keep_the_files_they_name(
        env: BackendEnv) -> None:
    """A rescale not committed yet (or abandoned) left new stores 3 and 4 naming old files."""
    infos, _ = build(env, 3)
    env.commit_log().write(1, entry_of(1, *infos.values(), partitions=3))
    made, _ = rescale(env, infos, 5)
    for batch in (2, 3):  # the old layout goes on; its batch 1 leaves retention
        env.commit_log().write(batch, entry_of(batch, *infos.values(), partitions=3))
    clean(env)
    assert named_files(env, made) <= set(env.paths())
    assert verify_checkpoint(env.storage) == []


def test_verify_reports_a_missing_file_of_another_stores_directory(env: BackendEnv) -> None:
    made, _ = rescaled_root(env, 3, 5)
    foreign = sorted(path for part, info in made.items() for path in named_files(env, {part: info})
                     if not path.startswith(store_dir(info.store_id) + "/"))
    env.storage.loop.run(env.storage.adelete_many(foreign[:1]))
    assert any(foreign[0] in problem and "missing" in problem
               for problem in verify_checkpoint(env.storage))


# --- failures -----------------------------------------------------------------------------------


def committed_root(env: BackendEnv, old: int) -> tuple[dict[int, StoreCommit], Content,
                                                       dict[str, str]]:
    """Old stores named by a commit entry and cleaned, with the root's files then."""
    infos, content = build(env, old)
    env.commit_log().write(1, entry_of(1, *infos.values(), partitions=old))
    cleanup_checkpoint(env.storage, 1, dry_run=False, incomplete_grace=0,
                       lease=env.lease())
    return infos, content, fingerprint(env)


def assert_old_layout_whole(env: BackendEnv, infos: dict[int, StoreCommit],
                            content: Content, files: dict[str, str]) -> None:
    """No new commit entry; the old files unchanged and the old stores read back; verify is
    clean; what the rescale left is only files of the version after the newest old one (no
    commit names it: orphans of a dead attempt, which cleanup takes once the floor passes
    them), and a cleanup now keeps every old file."""
    latest = env.commit_log().latest()
    assert latest is not None and latest[0] == 1
    now = fingerprint(env)
    assert {path: now[path] for path in files} == files
    version = max(info.version for info in infos.values()) + 1
    assert all(posixpath.basename(path).startswith(f"{version}_") for path in set(now) - set(files))
    assert verify_checkpoint(env.storage) == []
    assert_owned(read_back(env, infos), content, VALUES, len(infos))
    cleanup_checkpoint(env.storage, 1, dry_run=False, incomplete_grace=0, lease=env.lease())
    assert files.items() <= fingerprint(env).items()


def test_a_failure_midway_leaves_the_old_layout_whole_and_only_orphans(
        env: BackendEnv) -> None:
    infos, content, files = committed_root(env, 3)
    calls = 0

    def failing(cf: str) -> int:
        nonlocal calls
        calls += 1
        if calls > 6:  # after some partitions were committed
            raise RescaleError("injected: the group offsets became unreadable")
        return group_offset(cf)

    with pytest.raises(RescaleError, match="injected"):
        rescale_ranges(env.options(local_dir=os.path.join(env.local_dir, "rescale")), env.url,
                       OPERATOR, infos, 5, KEY_GROUPS, failing)
    assert set(fingerprint(env)) > set(files)  # something of the attempt was stored
    assert_old_layout_whole(env, infos, content, files)


CHILD = """
import json, sys
from pyspark_dstl.backend.backend_errors import ProviderError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.rescale.ranges import pieces, rescale_ranges
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
args = json.loads(sys.argv[1])
infos = {int(p): StoreCommit.from_dict(d) for p, d in args["infos"].items()}
options = BackendSettings(local_dir=args["local"], changelog=ChangelogSettings(persist_delay=0.0))
rescale_ranges(options, args["url"], args["operator"], infos, args["partitions"], KEY_GROUPS,
               lambda cf: 8 if cf.startswith("timers/") else 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["rescale_ranges_clipped:2", "rescale_ranges_copied:3",
                                   "rescale_ranges_committed:2", "rescale_ranges_done"])
def test_a_kill_at_a_range_rescale_point_leaves_the_old_layout_whole_and_only_orphans(
        env: BackendEnv, point: str) -> None:
    infos, content, files = committed_root(env, 3)
    env.close()
    argument = json.dumps({"infos": {str(p): info.to_dict() for p, info in infos.items()},
                           "local": os.path.join(env.local_dir, "child"), "url": env.url,
                           "operator": OPERATOR, "partitions": 5})
    environment = {**os.environ, "DSTL_KILL_POINT": point}
    child = subprocess.run([sys.executable, "-c", CHILD, argument], env=environment,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == -9, child.stderr
    assert f"killed at {point.split(':')[0]}" in child.stderr
    assert_old_layout_whole(env, infos, content, files)


@pytest.mark.slow
def test_a_cleanup_killed_at_each_of_its_deletes_in_turn_never_breaks_a_rescaled_root(
        env: BackendEnv) -> None:
    """After a rescale whose new stores name old stores' files, `cleanup --apply` is killed
    at its first delete, then at its second, and so on until a run finishes: after every
    kill verify is clean and the new stores read back exactly; what the last run leaves is
    what a cleanup that was never killed leaves."""
    made, content = rescaled_root(env, 3, 5)
    env.close()
    kills = 0
    while True:
        environment = {**os.environ, "DSTL_KILL_POINT": f"cleanup_delete:{kills + 1}"}
        child = subprocess.run([sys.executable, "-m", "pyspark_dstl", "cleanup", env.url,
                                "--retain", "1", "--apply"], env=environment,
                               capture_output=True, text=True, timeout=120, check=False)
        if child.returncode == 0:
            break
        assert child.returncode == -9, child.stderr
        kills += 1
        assert kills < 20, "the cleanup never finished"
        assert verify_checkpoint(env.storage) == []
        assert named_files(env, made) <= set(env.paths())
        assert_owned(read_back(env, made), content, VALUES, 5)
    assert kills >= 2  # manifests, then data files of the old stores
    assert verify_checkpoint(env.storage) == []
    assert_owned(read_back(env, made), content, TIMERS, 5)
    dry = cleanup_checkpoint(env.storage, 1, dry_run=True, incomplete_grace=0)
    assert dry.files == [] and dry.problems == []
