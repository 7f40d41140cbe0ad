"""V2 lineage: the design document's examples, its appendix case, and broken histories.

Versions 1..5 here stand for the document's 20..24. Attempts of one version are made the way
they happen in Spark: the same partition loaded twice at the same committed version.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import LineageError
from pyspark_dstl.backend.lineage.naming import snapshot_path, store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.api import StateStore, StateStoreProvider
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.support import S3Env
from tests.support.backend import (
    OPERATOR,
    BackendEnv,
    apply,
    file_env,
    s3_env,
    state_of,
)

STORE = f"{OPERATOR}/0"


@dataclass
class History:
    """Committed infos by name and the state each one should load to."""

    env: BackendEnv
    provider: StateStoreProvider
    infos: dict[str, StoreCommit] = field(default_factory=dict)
    models: dict[str, dict[bytes, bytes]] = field(default_factory=dict)

    def commit(self, name: str, base: str | None, changes: Mapping[bytes, bytes | None],
               materialize: bool = False) -> StoreCommit:
        info = self.infos[base] if base else None
        model = dict(self.models[base]) if base else {}
        store = self.provider.get_store(info.version if info else 0, info)
        apply(store, model, changes)
        self.infos[name] = store.commit(materialize=materialize)
        self.models[name] = model
        return self.infos[name]

    def changelog(self, name: str) -> str:
        info = self.infos[name]
        return f"{store_dir(STORE)}/{info.version}_{info.unique_id}.changelog"

    def snapshot(self, name: str) -> str:
        info = self.infos[name]
        return snapshot_path(STORE, info.version, info.unique_id)

    def load_fresh(self, name: str, by_info: bool = False) -> StateStore:
        """Load in a new process (own local directory): nothing open to reuse."""
        info = self.infos[name]
        provider = self.env.provider(self.env.backend())
        return provider.get_store(info.version, info if by_info else info.unique_id)


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    """20.zip, 21 by two attempts (ef.., f4..), 22 on f4.., 23 (the documents' picture)."""
    made = file_env(tmp_path)
    made_history = History(made, made.provider(made.backend()))
    made_history.commit("v1", None, {b"base": b"20", b"k": b"v1"}, materialize=True)
    made_history.commit("v2-ef", "v1", {b"attempt": b"ef", b"k": None})
    made_history.commit("v2-f4", "v1", {b"attempt": b"f4", b"only-f4": b"1"})
    made_history.commit("v3", "v2-f4", {b"v3": b"x"})
    yield made_history
    made.close()


def test_snapshot_exists(history: History) -> None:
    history.commit("v4", "v3", {b"v4": b"689a"}, materialize=True)
    store = history.load_fresh("v4")
    assert store.metrics()["replayed_change_sets"] == 0
    assert store.metrics()["replayed_files"] == 0
    assert state_of(store) == history.models["v4"]


def test_only_changelog_exists_uses_its_lineage_and_ignores_other_snapshot(
        history: History) -> None:
    history.commit("v4-689a", "v3", {b"v4": b"689a"})
    history.commit("v4-8205", "v3", {b"v4": b"8205", b"only-8205": b"1"}, materialize=True)
    assert history.snapshot("v4-8205") in history.env.paths()
    store = history.load_fresh("v4-689a")
    assert state_of(store) == history.models["v4-689a"]
    assert store.get(b"only-8205") is None and store.get(b"attempt") == b"f4"
    assert store.metrics()["replayed_files"] == 3  # 2_f4.., 3_.., 4_689a.. on 1's snapshot


def test_presumed_snapshot_missing_traces_back(history: History) -> None:
    history.commit("v4", "v3", {b"v4": b"689a"}, materialize=True)
    history.commit("v5", "v4", {b"v5": b"32e3"})
    history.env.delete(history.snapshot("v4"))  # its upload "failed"
    store = history.load_fresh("v5")
    assert state_of(store) == history.models["v5"]
    assert store.metrics()["replayed_files"] == 4  # 2_f4.., 3, 4, 5 on top of 1's snapshot


def test_presumed_snapshot_missing_traces_back_to_version_zero(history: History) -> None:
    history.commit("v4", "v3", {b"v4": b"689a"}, materialize=True)
    history.commit("v5", "v4", {b"v5": b"32e3"})
    history.env.delete(history.snapshot("v4"))
    history.env.delete(history.snapshot("v1"))
    store = history.load_fresh("v5")
    assert state_of(store) == history.models["v5"]
    assert store.metrics()["replayed_files"] == 5


def test_two_attempts_of_one_version_one_snapshot_not_in_lineage(history: History) -> None:
    history.commit("v4-689a", "v3", {b"v4": b"689a"})
    history.commit("v4-8205", "v3", {b"v4": b"8205", b"only-8205": b"1"}, materialize=True)
    history.commit("v5", "v4-689a", {b"v5": b"32e3"})
    for by_info in (False, True):
        store = history.load_fresh("v5", by_info=by_info)
        assert state_of(store) == history.models["v5"]
        assert store.get(b"v4") == b"689a" and store.get(b"only-8205") is None


def test_a_missing_changelog_in_the_lineage_is_a_lineage_error(history: History) -> None:
    history.commit("v4", "v3", {b"v4": b"x"})
    history.env.delete(history.changelog("v3"))
    with pytest.raises(LineageError, match=r"version 3 id .* has no changelog file"):
        history.load_fresh("v4")
    with pytest.raises(LineageError, match=r"3_[0-9a-f]+\.changelog"):
        history.load_fresh("v4", by_info=True)


def test_another_attempts_changes_under_a_lineage_name_are_refused(history: History) -> None:
    history.commit("v4-a", "v3", {b"sample": b"a"})
    history.commit("v4-b", "v3", {b"sample": b"b"})  # same sizes: same file layout
    history.commit("v5", "v4-b", {b"v5": b"x"})
    stolen = history.env.storage.get(history.changelog("v4-a"))
    history.env.replace(history.changelog("v4-b"), stolen)
    with pytest.raises(LineageError, match="expected version 4 id"):
        history.load_fresh("v5")
    with pytest.raises(LineageError, match="expected version 4 id"):
        history.load_fresh("v5", by_info=True)


def test_a_change_set_uploaded_twice_is_replayed_once(history: History) -> None:
    history.commit("v4", "v3", {b"v4": b"x", b"k": b"overwritten"})
    path = history.changelog("v4")
    # an upload that gave up can still land; its retry then goes into the next file
    history.env.storage.put(path.replace(".changelog", ".1.changelog"),
                            history.env.storage.get(path))
    store = history.load_fresh("v4")
    assert store.metrics()["replayed_files"] == 4
    assert state_of(store) == history.models["v4"]


def test_appendix_case_never_yields_the_wrongly_merged_state(tmp_path: Path) -> None:
    made = file_env(tmp_path)
    try:
        history = History(made, made.provider(made.backend()))
        # batch 1: task 1 puts foo under key 6 and snapshots; task 2 puts foo under key 8
        history.commit("task1", None, {b"6": b"foo"}, materialize=True)
        history.commit("task2", None, {b"8": b"foo"})
        made.delete(history.changelog("task2"))  # task 2's checkpoint is lost
        # batch 2 runs on what task 2 left in the open store
        history.commit("batch2", "task2", {b"6": b"bar"})
        for by_info in (False, True):
            with pytest.raises(LineageError):
                history.load_fresh("batch2", by_info=by_info)
        # the document's wrong recovery, 1.snapshot + 2.delta, as a forged checkpoint
        right = history.infos["batch2"]
        forged = StoreCommit(right.store_id, 2, right.unique_id, right.base_unique_id,
                                right.changelog.slice(1), history.infos["task1"].materialized,
                                ((2, right.unique_id),))
        with pytest.raises(LineageError, match=r"built on '[0-9a-f]+'; expected version 2"):
            made.provider(made.backend()).get_store(2, forged)
    finally:
        made.close()


def _wait_for_snapshot(history: History) -> None:
    """Background snapshot uploads: a generous bound, the test is not about speed."""
    assert isinstance(history.provider, ChangelogProvider)
    assert history.provider.wait_for_snapshot(timeout=30.0)


def test_one_executor_running_a_version_twice_uploads_both_snapshots_and_uses_the_committed(
        s3: S3Env, tmp_path: Path) -> None:
    every_commit = MaterializerSettings(interval=None, every_n_commits=1)
    made = s3_env(s3, tmp_path, materialization=every_commit)
    try:
        history = History(made, made.provider(made.backend()))
        history.commit("v1", None, {b"k": b"base"})
        _wait_for_snapshot(history)
        history.commit("v2-a", "v1", {b"k": b"a", b"sample": b"A"})
        _wait_for_snapshot(history)
        history.commit("v2-b", "v1", {b"k": b"b", b"sample": b"B"})  # same process, again
        _wait_for_snapshot(history)
        paths = made.paths(store_dir(STORE))
        assert history.snapshot("v2-a") in paths and history.snapshot("v2-b") in paths
        committed = history.load_fresh("v2-a")  # the driver committed attempt a
        assert committed.metrics()["replayed_change_sets"] == 0  # from 2_a's snapshot
        assert state_of(committed) == history.models["v2-a"]
        # the executor that ran both attempts reloads a, not the b it has open
        again = history.provider.get_store(2, history.infos["v2-a"])
        assert state_of(again) == history.models["v2-a"]
    finally:
        made.close()
