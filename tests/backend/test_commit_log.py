"""The driver's commit log: create-only generations, checksums, retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import CommitLogCorruptError, CommitLogError
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog, OperatorCommit
from tests.support.backend import (  # noqa: F401 - fixture
    BackendEnv,
    entry,
    env,
    info_of,
    s3_env,
)
from tests.support.moto_server import S3Env


def test_an_entry_reads_back_with_its_checkpoint_infos(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    written = entry(0, query="q1")
    path = log.write(0, written)
    assert path == "commits/0.0"
    read = log.read(0)
    lease = env.lease()
    assert read.to_dict() == {**written.to_dict(),
                              "writer": {"epoch": lease.epoch, "run_id": lease.run_id}}
    assert [info.store_id for info in read.infos()] == ["agg/0", "agg/1"]


def test_a_reexecuted_batch_writes_the_next_generation_and_readers_take_it(
        env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    log.write(3, entry(3, "first"))
    assert log.write(3, entry(3, "second"), rerun=True) == "commits/3.1"
    assert env.paths("commits/") == ["commits/3.0", "commits/3.1"]
    assert next(log.read(3).infos()).unique_id == "second"


def test_latest_is_the_highest_batch(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    assert log.latest() is None
    for batch_id in (0, 1, 2, 10):
        log.write(batch_id, entry(batch_id))
    latest = log.latest()
    assert latest is not None and latest[0] == 10 and latest[1].batch_id == 10
    assert log.batch_ids() == [0, 1, 2, 10]


def test_one_batch_entry_is_read_by_its_own_names(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    for batch_id in (1, 10, 11):
        log.write(batch_id, entry(batch_id))
    found = log.newest_of(1)
    assert found is not None and found.batch_id == 1  # not batch 10 or 11
    assert log.newest_of(5) is None


def test_one_batch_entry_is_its_newest_generation_that_is_not_a_fence(
        env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    log.write(2, entry(2, "first"))
    log.write(2, entry(2, "second"), rerun=True)
    assert log.fence(env.lease().epoch + 1, "next-run", None) == ["commits/3.0",
                                                                "commits/2.2"]
    found = log.newest_of(2)
    assert found is not None and next(found.infos()).unique_id == "second"
    assert log.newest_of(3) is None


def test_one_batch_entry_costs_one_short_listing_and_one_read_on_s3(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        log = made.commit_log()
        for batch_id in range(12):
            log.write(batch_id, entry(batch_id))
        s3.proxy.reset_log()
        found = CommitLog(made.storage).newest_of(1)
        assert found is not None and found.batch_id == 1
        lists = s3.proxy.records("GET", "list-type")
        assert len(lists) == 1 and "prefix=root/commits/1.&" in lists[0].query + "&"
        assert len(s3.proxy.records("GET")) == 2  # the listing and the entry
    finally:
        made.close()


def test_a_log_kept_across_batches_reads_no_retained_entry_twice_on_s3(
        s3: S3Env, tmp_path: Path) -> None:
    """The driver keeps one log for a query: each batch's look-up of the batch before costs
    one listing and no reads of the entries it has already seen."""
    made = s3_env(s3, tmp_path)
    try:
        log = made.commit_log()
        for batch_id in range(12):
            log.write(batch_id, entry(batch_id))
        kept = CommitLog(made.storage)
        listed = kept.generations()
        assert kept.batch_ids(listed) == list(range(12))
        log.write(12, entry(12))
        s3.proxy.reset_log()
        listed = kept.generations()
        assert kept.batch_ids(listed) == list(range(13))
        assert kept.read(12, listed).batch_id == 12
        assert len(s3.proxy.records("GET", "list-type")) == 1
        reads = [r.path for r in s3.proxy.records("GET") if "list-type" not in (r.query or "")]
        assert len(reads) == 1 and reads[0].endswith(f"/{s3.prefix}/commits/12.0")
    finally:
        made.close()


def test_a_kept_log_forgets_the_records_cleanup_deleted(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    for batch_id in range(3):
        log.write(batch_id, entry(batch_id))
    kept = CommitLog(env.storage)
    assert kept.batch_ids() == [0, 1, 2]
    env.storage.delete_many([info.path for info in log.obsolete(2)])
    assert kept.batch_ids() == [2]
    assert kept.read(2).batch_id == 2


def test_a_damaged_entry_is_reported_with_its_path(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    path = log.write(0, entry(0))
    data = bytearray(env.storage.get(path))
    data[data.index(b'"version": 1') + len(b'"version": ')] = ord("7")
    env.replace(path, bytes(data))
    with pytest.raises(CommitLogCorruptError, match=r"commits/0\.0.*fails its checksum"):
        log.read(0)


def test_an_unknown_format_version_is_refused(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    path = log.write(0, entry(0))
    document = json.loads(env.storage.get(path))
    document["format_version"] = 99
    env.replace(path, json.dumps(document).encode())
    with pytest.raises(CommitLogCorruptError, match="unsupported format version 99"):
        log.latest()


def test_obsolete_entries_are_older_batches_and_older_generations(
        env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    for batch_id in range(4):
        log.write(batch_id, entry(batch_id))
    log.write(3, entry(3, "again"), rerun=True)
    assert sorted(info.path for info in log.obsolete(2)) == [
        "commits/0.0", "commits/1.0", "commits/3.0"]
    assert [e.batch_id for e in log.retained(2)] == [2, 3]


def test_names_that_are_not_entries_are_ignored(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    log.write(1, entry(1))
    env.storage.put("commits/notes.txt", b"hello")
    env.storage.put("commits/01.0", b"not canonical")
    assert log.batch_ids() == [1]


def test_a_store_filed_under_the_wrong_partition_is_refused() -> None:
    with pytest.raises(CommitLogError, match="store 'agg/1' holds info of 'agg/0'"):
        CommitEntry(0, {"agg": OperatorCommit(2, {1: info_of(0, 1, "aaaa")})})
