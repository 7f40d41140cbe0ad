"""`python -m pyspark_dstl inspect|verify|cleanup` on a small real checkpoint."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.cli import main
from tests.support import S3Env
from tests.support.backend import BackendEnv, entry_of, file_env, s3_env
from tests.support.moto_server import ACCESS_KEY, REGION, SECRET_KEY
from tests.support.paths import REPO_ROOT

STORE_DIR = store_dir("agg/0")


def build_checkpoint(env: BackendEnv) -> list[StoreCommit]:
    """Three batches; the second snapshots; one losing attempt of version 3."""
    provider = env.provider(env.backend())
    infos: list[StoreCommit] = []
    for batch_id in range(3):
        previous = infos[-1] if infos else None
        if batch_id == 2:
            loser = provider.get_store(2, previous)
            loser.put(b"lost", b"1")
            loser.commit()
        store = provider.get_store(batch_id, previous)
        store.put(b"k%d" % batch_id, b"v" * 50)
        infos.append(store.commit(materialize=batch_id == 1))
        env.commit_log().write(batch_id, entry_of(batch_id, infos[-1]))
    return infos


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[tuple[BackendEnv, list[StoreCommit]]]:
    made = file_env(tmp_path)
    infos = build_checkpoint(made)
    yield made, infos
    made.close()


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def flip_byte(env: BackendEnv, path: str, offset: int) -> None:
    data = bytearray(env.storage.get(path))
    data[offset] ^= 0x01
    env.replace(path, bytes(data))


def test_inspect_prints_each_stores_versions_and_lineage(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, infos = checkpoint
    status, text = run("inspect", env.url)
    assert status == 0
    assert "3 committed batch(es), latest 2" in text
    assert f"committed version 3 id {infos[2].unique_id} on snapshot 2_{infos[1].unique_id}" \
        in text
    assert f"lineage 3_{infos[2].unique_id}" in text


def test_inspect_as_json_lists_every_attempt_of_every_version(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, infos = checkpoint
    status, text = run("inspect", env.url, "--json")
    versions = json.loads(text)["stores"]["agg/0"]["versions"]
    assert status == 0
    assert sorted(versions) == ["1", "2", "3"]
    assert len(versions["3"]["changelog"]) == 2  # the committed attempt and the loser
    assert versions["2"]["snapshot"] == [infos[1].unique_id]


def test_verify_passes_a_sound_checkpoint(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, _ = checkpoint
    # versions 1, 2 and 3, and the attempt of version 3 that completed its commit but lost
    assert run("verify", env.url) == (
        0, "layout batches 0-2: agg 1 partition(s) by pmod(hash(key columns), partitions)\n"
           "4 checkpoint(s), 0 uncommitted attempt(s), 0 problem(s)\n")


def test_verify_catches_a_flipped_byte_in_a_changelog(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, infos = checkpoint
    path = infos[0].changelog.paths[0]
    flip_byte(env, path, infos[0].changelog.segments[0].offset + 12)
    status, text = run("verify", env.url)
    assert status == 1
    assert f"changelog {path}:" in text and "CRC" in text
    assert "1 problem(s)" in text


def test_verify_catches_a_flipped_byte_in_a_snapshot_file(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, _ = checkpoint
    sst = next(p for p in env.paths(f"{STORE_DIR}/sst/"))
    flip_byte(env, sst, 100)
    status, text = run("verify", env.url)
    assert status == 1
    assert f"file {sst} fails its checksum" in text


def test_verify_catches_a_damaged_commit_log_entry(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, _ = checkpoint
    flip_byte(env, "commits/1.0", 40)
    status, text = run("verify", env.url)
    assert status == 1
    assert "commit log commits/1.0" in text


def test_cleanup_is_a_dry_run_unless_applied(
        checkpoint: tuple[BackendEnv, list[StoreCommit]]) -> None:
    env, infos = checkpoint
    first_changelog = infos[0].changelog.paths[0]
    status, text = run("cleanup", env.url, "--retain", "1")
    assert status == 0
    assert f"would delete {first_changelog}" in text and "pass --apply" in text
    assert first_changelog in env.paths()
    status, text = run("cleanup", env.url, "--retain", "1", "--apply")
    assert status == 0 and f"deleted {first_changelog}" in text
    assert first_changelog not in env.paths()
    assert run("verify", env.url)[0] == 0


def test_an_unknown_storage_scheme_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("inspect", "nosuchscheme://bucket/x")[0] == 2
    assert "nosuchscheme" in capsys.readouterr().err


def test_the_tool_runs_as_a_module_against_s3(s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        infos = build_checkpoint(made)
        command = [sys.executable, "-m", "pyspark_dstl", "inspect", made.url,
                   "--s3-endpoint", s3.endpoint_url, "--s3-region", REGION,
                   "--conf", f"spark.dstl.changelog.s3.accessKeyId={ACCESS_KEY}",
                   "--conf", f"spark.dstl.changelog.s3.secretAccessKey={SECRET_KEY}",
                   "--conf", "spark.dstl.changelog.s3.addressingStyle=path"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                cwd=REPO_ROOT, check=False)
        assert result.returncode == 0, result.stderr
        assert f"committed version 3 id {infos[2].unique_id}" in result.stdout
    finally:
        made.close()


def test_a_symlinked_store_folder_is_seen_by_the_tools_as_by_loads(
        checkpoint: tuple[BackendEnv, list[StoreCommit]], tmp_path: Path) -> None:
    env, infos = checkpoint
    assert env.file_root is not None
    folder = env.file_root / STORE_DIR
    moved = tmp_path / "other-disk" / "agg-0"
    moved.parent.mkdir()
    folder.rename(moved)
    folder.symlink_to(moved)
    loaded = env.provider(env.backend()).get_store(3, infos[2].unique_id)
    assert dict(loaded.iterator())[b"k2"] == b"v" * 50
    loaded.abort()
    status, text = run("verify", env.url)
    assert status == 0 and "0 problem(s)" in text and "missing" not in text
    versions = json.loads(run("inspect", env.url, "--json")[1])["stores"]["agg/0"]["versions"]
    assert sorted(versions) == ["1", "2", "3"]
    status, text = run("cleanup", env.url, "--retain", "1", "--apply")
    assert status == 0 and f"deleted {infos[0].changelog.paths[0]}" in text
    assert not (moved / infos[0].changelog.paths[0].rsplit("/", 1)[1]).exists()
    assert run("verify", env.url)[0] == 0
