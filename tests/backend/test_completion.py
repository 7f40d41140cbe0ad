"""Only attempts whose store commit completed are checkpoints: loads, inspect, verify, cleanup.

A large transaction uploads early (past the pre-emptive threshold, with a small write cache);
if it then aborts, its files exist but none says the commit completed. A crash after early
uploads is in tests/reliability/test_crash.py.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import UncommittedAttemptError
from pyspark_dstl.backend.lineage.naming import parse_checkpoint_name, store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import LogHeader, encode_file, read_file
from pyspark_dstl.cli import main
from tests.support.backend import PROVIDER_IDS, PROVIDERS, BackendEnv, entry_of, file_env, state_of

STORE = "agg/0"
EARLY = ChangelogSettings(persist_delay=0.0, preemptive_persist_threshold=2000)


def early_env(tmp_path: Path, provider_class: str = PROVIDERS[0]) -> BackendEnv:
    """Uploads before the commit: a cache of 10 keys, pre-emptive uploads past 2 kB."""
    made = file_env(tmp_path, provider_class, extra={"tx_cache_max_entries": 10})
    made.changelog = EARLY
    return made


@pytest.fixture(params=PROVIDERS, ids=PROVIDER_IDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendEnv]:
    made = early_env(tmp_path, request.param)
    yield made
    made.close()


def committed_version_one(env: BackendEnv) -> StoreCommit:
    store = env.provider(env.backend()).get_store(0)
    store.put(b"base", b"1")
    info = store.commit()
    env.commit_log().write(0, entry_of(0, info))
    return info


def write_early(env: BackendEnv, store: StateStore, uploads: int = 3) -> list[str]:
    """Puts until the transaction uploaded `uploads` files of its own (20 keys of 100 bytes
    are two flushes, over the 2 kB threshold); each upload awaited, so each is its own file.
    Returns the files in upload order."""
    prefix = f"{store_dir(STORE)}/{store.version + 1}_{store.unique_id}"
    for upload in range(uploads):
        for index in range(20):
            store.put(b"k%02d%02d" % (upload, index), b"v" * 100)
        wait_for_files(env, prefix, upload + 1)
    return attempt_files(env, prefix)


def attempt_files(env: BackendEnv, prefix: str) -> list[str]:
    """An attempt's files in upload order (`.changelog`, `.1.changelog`, ...)."""
    def part(path: str) -> int:
        name = parse_checkpoint_name(path)
        assert name is not None
        return name.part

    return sorted(env.paths(prefix), key=part)


def large_transaction(env: BackendEnv, base: StoreCommit) -> tuple[str, list[str]]:
    """(unique id, files) of a version-2 attempt that uploaded early and then aborted."""
    store = env.provider(env.backend()).get_store(1, base)
    files = write_early(env, store)
    unique_id = store.unique_id
    store.abort()
    return unique_id, files


def wait_for_files(env: BackendEnv, prefix: str, count: int) -> list[str]:
    deadline = time.monotonic() + 30
    while len(found := env.paths(prefix)) < count:
        assert time.monotonic() < deadline, f"only {found} under {prefix}"
        time.sleep(0.02)
    return found


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_an_attempt_aborted_after_early_uploads_is_refused_by_id_on_another_host(
        env: BackendEnv) -> None:
    base = committed_version_one(env)
    unique_id, files = large_transaction(env, base)
    assert len(files) == 3
    with pytest.raises(UncommittedAttemptError,
                       match=f"store 'agg/0': attempt 2_{unique_id} never completed its "
                             f"commit .*early upload"):
        env.provider(env.backend()).get_store(2, unique_id)


def test_a_large_committed_attempt_loads_by_id_with_every_change(env: BackendEnv) -> None:
    base = committed_version_one(env)
    store = env.provider(env.backend()).get_store(1, base)
    write_early(env, store)
    store.put(b"last", b"1")
    info = store.commit()
    assert len(env.paths(f"{store_dir(STORE)}/2_{info.unique_id}")) == 4
    loaded = state_of(env.provider(env.backend()).get_store(2, info.unique_id))
    assert len(loaded) == 1 + 60 + 1 and loaded[b"last"] == b"1" and loaded[b"base"] == b"1"


def test_a_commit_missing_one_of_its_uploads_is_not_a_checkpoint(env: BackendEnv) -> None:
    base = committed_version_one(env)
    store = env.provider(env.backend()).get_store(1, base)
    files = write_early(env, store)
    info = store.commit()
    env.delete(files[1])  # an early upload lost, the final one intact
    with pytest.raises(UncommittedAttemptError, match="its files lack"):
        env.provider(env.backend()).get_store(2, info.unique_id)


def test_inspect_verify_and_cleanup_treat_an_aborted_attempt_as_no_checkpoint(
        tmp_path: Path) -> None:
    env = early_env(tmp_path)
    try:
        base = committed_version_one(env)
        unique_id, files = large_transaction(env, base)
        store = env.provider(env.backend()).get_store(1, base)  # version 2 committed after
        store.put(b"after", b"1")
        env.commit_log().write(1, entry_of(1, store.commit()))
        report = json.loads(run_cli("inspect", env.url, "--json")[1])
        versions = report["stores"][STORE]["versions"]
        assert versions["2"]["uncommitted"] == [unique_id]
        assert unique_id not in versions["2"]["changelog"]
        status, text = run_cli("verify", env.url)
        assert status == 0
        assert f"not a checkpoint (its commit never completed): store {STORE}: 2_{unique_id}" \
            in text
        assert "2 checkpoint(s), 1 uncommitted attempt(s), 0 problem(s)" in text
        young = cleanup_checkpoint(env.storage, 5, dry_run=False)  # default grace: 5 min
        assert not set(files) & set(young.files)
        aged = cleanup_checkpoint(env.storage, 5, dry_run=False, incomplete_grace=0.0)
        assert sorted(aged.files) == sorted(files)
        assert [s.uncommitted for s in aged.stores] == [[f"2_{unique_id}"]]
        assert run_cli("verify", env.url)[0] == 0
    finally:
        env.close()


def test_files_written_before_completion_marks_load_as_before(tmp_path: Path) -> None:
    env = early_env(tmp_path)
    try:
        base = committed_version_one(env)
        store = env.provider(env.backend()).get_store(1, base)
        store.put(b"k", b"v")
        info = store.commit()
        for path in env.paths(f"{store_dir(STORE)}/"):
            header, change_sets = read_file(env.storage.get(path), path)
            logs = [(LogHeader(log.log_id, {k: v for k, v in log.metadata.items()
                                            if k != "commit"}),
                     [cs for cs in change_sets if cs.log_id == log.log_id])
                    for log in header.logs]
            env.replace(path, encode_file(header.writer_id, logs).data)  # no "commit" key
        assert state_of(env.provider(env.backend()).get_store(2, info.unique_id)) == {
            b"base": b"1", b"k": b"v"}
        assert "0 uncommitted attempt(s)" in run_cli("verify", env.url)[1]
    finally:
        env.close()
