"""`python -m pyspark_dstl rescale <checkpoint> --partitions N`, without Spark: every key (state
variables and timers alike) ends in the partition owning its key group under N, nothing is
lost or added, and a kill at any point leaves the old layout or the new one, never a mix; a
rerun finishes the job. A checkpoint of the hash layout (written before key groups) is
migrated to key groups once, key by key; after that, rescales move ranges."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.cli import main
from tests.support import S3Env
from tests.support.backend import OPERATOR, BackendEnv, file_env, s3_env
from tests.support.moto_server import ACCESS_KEY, REGION, SECRET_KEY
from tests.support.rescale import (
    KEY_TYPES,
    Content,
    build_checkpoint,
    check_layout,
    latest_entry,
    users,
)

USERS = users(400)
OLD, NEW = 3, 5


def build(env: BackendEnv, key_types: list[str] | None = KEY_TYPES,
          grouped: bool = True) -> Content:
    return build_checkpoint(env, OLD, USERS, key_types=key_types, grouped=grouped)


def latest(env: BackendEnv) -> CommitEntry:
    return latest_entry(env)


def assert_layout(env: BackendEnv, partitions: int, content: Content,
                  grouped: bool = True) -> None:
    check_layout(env, content, partitions, grouped)


def rescale(env: BackendEnv, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(["rescale", env.url, *args], out=out)
    return status, out.getvalue()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


def test_rescale_puts_every_key_and_timer_in_the_partition_owning_its_key_group(
        env: BackendEnv) -> None:
    content = build(env)
    status, text = rescale(env, "--partitions", str(NEW))
    assert status == 0, text
    assert f"rescaled operator {OPERATOR!r} at batch 1 from {OLD} to {NEW} partition(s) " \
        f"(ranges of key groups)" in text
    assert_layout(env, NEW, content)


def test_a_hash_layout_checkpoint_is_migrated_to_key_groups_key_by_key(env: BackendEnv) -> None:
    content = build(env, grouped=False)
    check_layout(env, content, OLD, grouped=False)
    status, text = rescale(env, "--partitions", str(NEW))
    assert status == 0, text
    assert f"migrated to key groups operator {OPERATOR!r} at batch 1 from {OLD} to {NEW}" in text
    assert_layout(env, NEW, content)
    record = latest(env).extra["rescale"]
    assert record["migration"] is True and record["method"].startswith("keys")


def test_a_hash_layout_checkpoint_is_migrated_even_at_its_own_partition_count(
        env: BackendEnv) -> None:
    content = build(env, grouped=False)
    status, text = rescale(env, "--partitions", str(OLD))
    assert status == 0 and "migrated to key groups" in text
    assert_layout(env, OLD, content)
    assert "nothing to do" in rescale(env, "--partitions", str(OLD))[1]


def test_after_the_migration_a_rescale_moves_ranges(env: BackendEnv) -> None:
    content = build(env, grouped=False)
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    assert rescale(env, "--partitions", "2")[0] == 0
    record = latest(env).extra["rescale"]
    assert (record["migration"], record["method"]) == (False, "ranges of key groups")
    assert_layout(env, 2, content)


def test_rescaled_stores_are_new_stores_numbered_after_the_old_versions(
        env: BackendEnv) -> None:
    build(env)
    before = latest(env).operators[OPERATOR].stores
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    after = latest(env).operators[OPERATOR].stores
    old_ids = {info.unique_id for info in before.values()}
    for info in after.values():
        assert info.version == max(i.version for i in before.values()) + 1
        assert info.unique_id not in old_ids and info.base_unique_id is None
        assert info.materialized is not None and info.materialized.unique_id == info.unique_id
        assert info.changelog.size == 0


def test_rescale_is_a_new_generation_of_the_newest_batch_recording_what_it_did(
        env: BackendEnv) -> None:
    build(env, grouped=False)
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    generations = env.commit_log().generations()
    env.close()
    assert sorted(g for g, _ in generations[1]) == [0, 1]
    record = latest(env).extra["rescale"]
    assert (record["from_partitions"], record["to_partitions"], record["batch_id"],
            record["mode"], record["keys"], record["migration"]) == \
        (OLD, NEW, 1, "offline", 4 * len(USERS), True)
    assert record["bytes_read"] > 0 and record["bytes_written"] > 0
    assert rescale(env, "--partitions", "2")[0] == 0
    record = latest(env).extra["rescale"]
    assert (record["from_partitions"], record["to_partitions"], record["migration"]) == \
        (NEW, 2, False)
    assert record["files_shared"] > 0 and record["bytes_shared"] > 0
    assert record["bytes_uploaded"] + record["bytes_shared"] == record["bytes_written"]


def test_rescale_down_and_back_keeps_the_state(env: BackendEnv) -> None:
    content = build(env)
    for partitions in (7, 2, 1, OLD):
        assert rescale(env, "--partitions", str(partitions))[0] == 0
        assert_layout(env, partitions, content)


def test_inspect_and_verify_show_the_layout_of_every_batch(env: BackendEnv) -> None:
    build(env)
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    for command in ("inspect", "verify"):
        out = io.StringIO()
        assert main([command, env.url], out=out) == 0
        text = out.getvalue()
        assert f"layout batch 0: {OPERATOR} {OLD} partition(s)" in text
        assert (f"layout batch 1: {OPERATOR} {NEW} partition(s) by 4096 key groups "
                f"(pmod(hash(key columns), 4096)), each partition owning a contiguous range "
                f"(rescaled by moving ranges offline from {OLD} partition(s) at batch 1)"
                ) in text
    out = io.StringIO()
    assert main(["inspect", env.url, "--json"], out=out) == 0
    layouts = json.loads(out.getvalue())["layouts"]
    assert [(item["batch_id"], item["operators"][OPERATOR], item["key_groups"])
            for item in layouts] == [(0, OLD, 4096), (1, NEW, 4096)]


def test_inspect_shows_the_hash_layout_and_its_migration(env: BackendEnv) -> None:
    build(env, grouped=False)
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    out = io.StringIO()
    assert main(["inspect", env.url], out=out) == 0
    text = out.getvalue()
    assert (f"layout batch 0: {OPERATOR} {OLD} partition(s) by pmod(hash(key columns), "
            f"partitions) (the hash layout") in text
    assert (f"layout batch 1: {OPERATOR} {NEW} partition(s) by 4096 key groups") in text
    assert f"(migrated to key groups offline from {OLD} partition(s) at batch 1)" in text


def test_a_partition_count_below_one_is_refused_naming_the_option(
        env: BackendEnv, capsys: pytest.CaptureFixture[str]) -> None:
    build(env)
    assert rescale(env, "--partitions", "0")[0] == 2
    assert "--partitions N" in capsys.readouterr().err
    assert latest(env).operators[OPERATOR].num_partitions == OLD


def test_the_command_runs_without_importing_pyspark(env: BackendEnv) -> None:
    build(env)
    script = ("import sys\n"
              "from pyspark_dstl.cli import main\n"
              f"code = main(['rescale', {env.url!r}, '--partitions', '{NEW}'])\n"
              "assert code == 0, code\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert latest(env).operators[OPERATOR].num_partitions == NEW


def test_rescale_to_the_same_count_changes_nothing(env: BackendEnv) -> None:
    build(env)
    status, text = rescale(env, "--partitions", str(OLD))
    assert status == 0 and "nothing to do" in text
    assert latest(env).extra.get("rescale") is None


def test_migrating_a_checkpoint_without_recorded_key_types_needs_them_named(
        env: BackendEnv, capsys: pytest.CaptureFixture[str]) -> None:
    content = build(env, key_types=None, grouped=False)
    assert rescale(env, "--partitions", str(NEW))[0] == 2
    assert "--key-types" in capsys.readouterr().err
    assert latest(env).operators[OPERATOR].num_partitions == OLD
    assert rescale(env, "--partitions", str(NEW), "--key-types", "string")[0] == 0
    assert_layout(env, NEW, content)
    assert latest(env).extra["key_types"] == ["string"]


def test_a_range_rescale_needs_no_key_types(env: BackendEnv) -> None:
    content = build(env, key_types=None)
    assert rescale(env, "--partitions", str(NEW))[0] == 0
    assert_layout(env, NEW, content)


def test_more_partitions_than_key_groups_are_refused_naming_the_limit(
        env: BackendEnv, capsys: pytest.CaptureFixture[str]) -> None:
    build(env)
    assert rescale(env, "--partitions", "5000")[0] == 2
    assert "choose at most 4096 partitions" in capsys.readouterr().err
    assert latest(env).operators[OPERATOR].num_partitions == OLD


@pytest.mark.s3
def test_rescale_on_s3_puts_every_key_in_the_partition_owning_its_key_group(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    content = build(made)
    status, text = rescale(made, "--partitions", str(NEW), "--s3-endpoint", s3.endpoint_url,
                           "--s3-region", REGION,
                           "--conf", f"spark.dstl.changelog.s3.accessKeyId={ACCESS_KEY}",
                           "--conf", f"spark.dstl.changelog.s3.secretAccessKey={SECRET_KEY}",
                           "--conf", "spark.dstl.changelog.s3.addressingStyle=path")
    assert status == 0, text
    assert_layout(made, NEW, content)
    made.close()


# --- crashes -------------------------------------------------------------------------------------

RANGE_KILL_POINTS = ["rescale_ranges_clipped:2", "rescale_ranges_copied",
                     "rescale_ranges_committed:1", "rescale_ranges_committed:4",
                     "rescale_ranges_done", "commit_log_before", "commit_log_after"]
MIGRATION_KILL_POINTS = ["rescale_store_committed:1", "rescale_store_committed:4",
                         "rescale_stores_done", "commit_log_after"]


def run_tool(env: BackendEnv, kill: str | None) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ)
    environment.pop("DSTL_KILL_POINT", None)
    if kill is not None:
        environment["DSTL_KILL_POINT"] = kill
    return subprocess.run([sys.executable, "-m", "pyspark_dstl", "rescale", env.url,
                           "--partitions", str(NEW)], env=environment, capture_output=True,
                          text=True, timeout=120, check=False)


def kill_and_rerun(env: BackendEnv, kill: str, grouped: bool) -> None:
    content = build(env, grouped=grouped)
    killed = run_tool(env, kill)
    assert killed.returncode == -9, killed.stderr
    partitions = latest(env).operators[OPERATOR].num_partitions
    done = kill == "commit_log_after"
    assert partitions == (NEW if done else OLD)
    assert_layout(env, partitions, content, grouped=grouped or done)
    assert main(["verify", env.url], out=io.StringIO()) == 0
    rerun = run_tool(env, None)
    assert rerun.returncode == 0, rerun.stderr
    assert_layout(env, NEW, content)
    assert main(["verify", env.url], out=io.StringIO()) == 0


@pytest.mark.slow
@pytest.mark.parametrize("kill", RANGE_KILL_POINTS)
def test_a_kill_during_a_range_rescale_leaves_one_whole_layout_and_a_rerun_finishes_it(
        env: BackendEnv, kill: str) -> None:
    kill_and_rerun(env, kill, grouped=True)


@pytest.mark.slow
@pytest.mark.parametrize("kill", MIGRATION_KILL_POINTS)
def test_a_kill_during_a_migration_leaves_one_whole_layout_and_a_rerun_finishes_it(
        env: BackendEnv, kill: str) -> None:
    kill_and_rerun(env, kill, grouped=False)
