"""Crash anywhere: SIGKILL the workload, restart it, get exactly the last committed batch.

The short form of `python -m tests.reliability.soak` (about 30 kills); see crash.py for the
kinds of death and docs/reliability.md for the soak's figures.
"""

from __future__ import annotations

import io
import json
import os
import random
import time
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import UncommittedAttemptError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.faults import POINTS
from pyspark_dstl.backend.lineage.naming import snapshot_path
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint, default_incomplete_grace
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.cli import main as backend_cli
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.reliability.chain_round import CHAIN_KILLS
from tests.reliability.child import ChildRun
from tests.reliability.crash import POINT_COUNTS, WIRE_TARGETS, CrashHarness, workload_conf
from tests.reliability.model import WorkloadSpec
from tests.reliability.rescale_round import COMMIT_POINTS, MIGRATION_POINTS, RANGE_POINTS
from tests.reliability.rescale_round import POINTS as RESCALE_POINTS
from tests.reliability.soak import leaked_temp_files, rescale_rounds, verify_root
from tests.reliability.workload import Workload
from tests.support import FaultRule, S3Env
from tests.support.backend import apply, s3_env, state_of
from tests.support.move_job import MOVE_POINTS

pytestmark = pytest.mark.slow


def file_harness(tmp_path: Path, seed: int) -> CrashHarness:
    return CrashHarness((tmp_path / "ckpt").as_uri(), tmp_path, seed, random.Random(seed))


def test_random_kills_on_a_file_root_lose_no_committed_batch(tmp_path: Path) -> None:
    harness = file_harness(tmp_path, seed=11)
    for _ in range(10):
        harness.random_kill()
    harness.verify_final()
    assert harness.stats.random_kills >= 8, "most runs should die before they finish"
    stats = harness.stats
    assert stats.recoveries_verified + stats.kills_before_recovery == stats.runs
    assert harness.stats.highest_committed > 0
    assert verify_root(harness.url) == []


def test_a_kill_at_every_library_kill_point_is_survived(tmp_path: Path) -> None:
    harness = file_harness(tmp_path, seed=12)
    for point in POINT_COUNTS:
        harness.point_kill(point)
        harness.point_kill(point)
    harness.verify_final()
    assert harness.stats.points_not_reached == 0
    assert dict(harness.stats.point_kills) == {point: 2 for point in POINT_COUNTS}
    assert verify_root(harness.url) == []


def test_every_kill_point_is_reached_by_the_workload_the_rescale_rounds_or_its_own_test() -> None:
    # the workload declares no state schemas: the schema record's point has its own test
    # (tests/spark/codec/test_schema_evolution.py); a stage of a Spark batch is the chained
    # rounds' (tests/reliability/test_chain_crash.py); the moves' points are killed in real
    # Spark processes by tests/spark/moves/test_move_kills.py
    chained = {point for point, _ in CHAIN_KILLS}
    assert set(POINTS) == (set(POINT_COUNTS) | set(RESCALE_POINTS) | {"schema_record_after"}
                           | chained | set(MOVE_POINTS))
    assert "stage_done" in chained


def test_a_kill_at_every_point_of_the_migration_leaves_one_whole_layout_and_a_rerun_finishes(
        tmp_path: Path) -> None:
    harness = file_harness(tmp_path, seed=14)
    for point in MIGRATION_POINTS + COMMIT_POINTS:  # each on a root still in the hash layout
        rounds = rescale_rounds(harness, None, f"migration-{point}")
        rounds.round(point)
        assert verify_root(rounds.env.url) == []
        rounds.env.close()
    assert harness.stats.points_not_reached == 0
    assert dict(harness.stats.point_kills) == {
        "rescale_store_committed": 1, "rescale_stores_done": 1,
        "rescale_commit_log_before": 1, "rescale_commit_log_after": 1}


def test_a_kill_at_every_point_of_a_range_rescale_leaves_one_whole_layout_and_a_rerun_finishes(
        tmp_path: Path) -> None:
    harness = file_harness(tmp_path, seed=15)
    rounds = rescale_rounds(harness, None)
    rounds.round("rescale_store_committed")  # the migration, then rescales that move ranges
    for point in RANGE_POINTS + COMMIT_POINTS:
        rounds.round(point)
    assert harness.stats.points_not_reached == 0
    assert dict(harness.stats.point_kills) == {
        "rescale_store_committed": 1, **{point: 1 for point in RANGE_POINTS},
        "rescale_commit_log_before": 1, "rescale_commit_log_after": 1}
    assert verify_root(rounds.env.url) == []
    rounds.env.close()


def test_kills_while_a_request_is_held_before_or_after_the_server_applied_it(
        s3: S3Env, tmp_path: Path) -> None:
    harness = CrashHarness(s3.url, tmp_path, 13, random.Random(13), s3=s3)
    for target in WIRE_TARGETS:
        for applied in (False, True):
            harness.wire_kill(target, applied)
    harness.verify_final()
    expected = {f"{name}_{'applied' if applied else 'not_applied'}": 1
                for name, _, _ in WIRE_TARGETS for applied in (False, True)}
    assert dict(harness.stats.wire_kills) == expected
    assert verify_root(s3.url, s3) == []


def test_random_and_kill_point_deaths_on_the_s3_api_lose_no_committed_batch(
        s3: S3Env, tmp_path: Path) -> None:
    harness = CrashHarness(s3.url, tmp_path, 14, random.Random(14), s3=s3)
    for number in range(6):
        (harness.point_kill if number % 2 else harness.random_kill)()
    harness.verify_final()
    assert harness.stats.kills >= 5
    assert verify_root(s3.url, s3) == []


def test_cleanup_removes_the_temp_file_of_an_upload_killed_halfway(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    spec = WorkloadSpec(seed=15, partitions=1)
    options = BackendSettings.from_mapping(workload_conf(tmp_path / "local"))
    workload = Workload(spec, root.as_uri(), options, retain=1)
    try:
        workload.recover()
        workload.run(1)
        # what SIGKILL between LocalStorage's write of the temp file and its link leaves
        leftover = root / "state" / spec.operator / "0" / ".tmp-0123456789abcdef"
        leftover.write_bytes(b"x" * 99)
        # killed long ago: older than the grace that protects uploads still running
        killed_at = time.time() - 2 * default_incomplete_grace(options.changelog)
        os.utime(leftover, (killed_at, killed_at))
        workload.run(4)
        workload.cleanup()
    finally:
        workload.close()
    assert leaked_temp_files(root) == 0


def test_a_store_taken_over_while_an_older_snapshot_uploads_commits_with_all_changes(
        s3: S3Env, tmp_path: Path) -> None:
    env = s3_env(s3, tmp_path, materialization=MaterializerSettings(interval=None,
                                                                    every_n_commits=3))
    try:
        owner = env.provider(env.backend())  # the host that dies after version 4
        model: dict[bytes, bytes] = {}
        info = None
        for version in range(1, 5):
            store = owner.get_store(version - 1, info)
            apply(store, model, {b"k%d" % version: b"v%d" % version})
            if version == 3:  # the snapshot of version 3 is still uploading at version 4
                s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains=".snapshot",
                                            delay=2.0, times=1))
            info = store.commit()
        assert info is not None and info.pending_snapshot is not None
        manifest = snapshot_path(info.store_id, *info.pending_snapshot)
        deadline = time.monotonic() + 30  # generous: the upload is held 2 s
        while manifest not in env.paths():
            assert time.monotonic() < deadline, "the delayed manifest never landed"
            time.sleep(0.05)
        heir = env.provider(env.backend()).get_store(4, info)  # another host takes over
        apply(heir, model, {b"k5": b"v5"})
        info5 = heir.commit()
        assert state_of(env.provider(env.backend()).get_store(5, info5)) == model
    finally:
        env.close()


def attempt_with_early_uploads(tmp_path: Path, url: str, end: str) -> tuple[int, str]:
    """A task attempt of batch 3 that uploads three times before its commit, then aborts
    ("abort") or dies ("kill"); (version, unique id) of the attempt."""
    run = ChildRun([url, "--name", "E", "--batch", "3", "--seed", "15", "--early",
                    "--local-dir", str(tmp_path / "host-e")], tmp_path / "early.stderr",
                   module="tests.reliability.attempt")
    try:
        loaded = run.wait_for(lambda e: e.get("event") in ("loaded", "error"), 60)
        assert loaded is not None and loaded["event"] == "loaded", run.stderr_tail()
        version, unique_id = loaded["version"] + 1, loaded["unique_id"]
        prefix = (Path(url.removeprefix("file://")) / "state" / "rel" / "0")
        for upload in range(1, 4):
            run.send("write 20")
            deadline = time.monotonic() + 60
            while len(list(prefix.glob(f"{version}_{unique_id}*.changelog"))) < upload:
                assert time.monotonic() < deadline, run.stderr_tail()
                time.sleep(0.02)
        if end == "kill":
            run.kill()
        else:
            run.send("abort")
            assert run.wait_for(lambda e: e.get("event") == "aborted", 60) is not None
            run.send("exit")
    finally:
        run.wait(60)
    return version, unique_id


@pytest.mark.parametrize("end", ["abort", "kill"])
def test_an_attempt_that_ends_after_early_uploads_is_never_a_checkpoint(
        tmp_path: Path, end: str) -> None:
    url = (tmp_path / "ckpt").as_uri()
    spec = WorkloadSpec(seed=15, partitions=1)
    options = BackendSettings.from_mapping(workload_conf(tmp_path / "host-w"))
    workload = Workload(spec, url, options, retain=5)
    try:
        workload.recover()
        workload.run(2)
    finally:
        workload.close()
    version, unique_id = attempt_with_early_uploads(tmp_path, url, end)
    reader = StateBackend(options.with_changes(local_dir=str(tmp_path / "host-r")))
    with reader, pytest.raises(UncommittedAttemptError, match=f"attempt {version}_{unique_id} "
                                                              f"never completed its commit"):
        reader.provider(url, spec.operator, 0).get_store(version, unique_id)
    out = io.StringIO()
    assert backend_cli(["inspect", url, "--json"], out=out) == 0
    versions = json.loads(out.getvalue())["stores"]["rel/0"]["versions"]
    assert versions[str(version)]["uncommitted"] == [unique_id]
    out = io.StringIO()
    assert backend_cli(["verify", url], out=out) == 0
    assert f"rel/0: {version}_{unique_id}: its newest file" in out.getvalue()
    workload = Workload(spec, url, options.with_changes(local_dir=str(tmp_path / "host-w")),
                        retain=5)
    try:
        workload.recover()
        workload.run(4)  # the lineage passes the attempt's version
        storage = workload.backend.context(url).storage
        report = cleanup_checkpoint(storage, 5, dry_run=False, incomplete_grace=0.0,
                                    lease=workload.take())
        assert [store.uncommitted for store in report.stores] == [[f"{version}_{unique_id}"]]
        assert not list((tmp_path / "ckpt").rglob(f"{version}_{unique_id}*"))
        assert workload.recover() == 4  # checked against the model
    finally:
        workload.close()
    assert verify_root(url) == []
