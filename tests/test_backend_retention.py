"""Retention under random histories: commits, attempts that lose, aborts, restarts,
snapshots (forced and periodic) and cleanups. After every cleanup each retained checkpoint
loads to the model's state, and nothing unreferenced is left below the retained range."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.checkpoint import CheckpointInfo
from backend.cleanup import cleanup_checkpoint
from backend.listing import list_store_dir
from materializer.listing import aread_manifest
from materializer.names import parse_uploaded_version
from materializer.options import MaterializerOptions
from tests.support.backend import OPERATOR, BackendEnv, apply, entry_of, file_env, state_of

STORE = f"{OPERATOR}/0"
KEYS = [b"k%d" % i for i in range(6)]
changes = st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=8)),
                          max_size=4)
Operation = tuple[str, dict[bytes, bytes | None], object]
operations: st.SearchStrategy[list[Operation]] = st.lists(st.one_of(
    st.tuples(st.just("commit"), changes, st.booleans()),
    st.tuples(st.just("losing_attempt"), changes, st.booleans()),
    st.tuples(st.just("abort"), changes, st.just(False)),
    st.tuples(st.just("restart"), st.just({}), st.just(False)),
    st.tuples(st.just("cleanup"), st.just({}), st.integers(1, 3)),
), min_size=1, max_size=14)


class Driver:
    def __init__(self, env: BackendEnv) -> None:
        self.env = env
        self.provider = env.provider(env.backend(tx_cache_max_entries=3))
        self.infos: list[CheckpointInfo] = []
        self.models: list[dict[bytes, bytes]] = []
        self.logged: list[int] = []  # batches the commit log still holds

    def attempt(self, change: dict[bytes, bytes | None], outcome: str,
                materialize: bool) -> None:
        info = self.infos[-1] if self.infos else None
        model = dict(self.models[-1]) if self.models else {}
        store = self.provider.get_store(info.version if info else 0, info)
        apply(store, model, change)
        if outcome == "abort":
            store.abort()
            return
        committed = store.commit(materialize=materialize)
        if outcome == "commit":
            batch_id = len(self.infos)
            self.env.commit_log().write(batch_id, entry_of(batch_id, committed))
            self.infos.append(committed)
            self.models.append(model)
            self.logged.append(batch_id)

    def restart(self) -> None:
        self.provider = self.env.provider(self.env.backend(tx_cache_max_entries=3))

    def cleanup(self, retain: int) -> None:
        report = cleanup_checkpoint(self.env.storage, retain, dry_run=False)
        assert report.problems == []
        retained = self.logged = self.logged[-retain:]
        if not retained:
            return
        self.check_loads(retained)
        floor = report.stores[0].floor
        newest = self.infos[retained[-1]]
        oldest = self.infos[retained[0]].version
        lowered = newest.pending_snapshot[0] if newest.pending_snapshot else oldest
        assert floor in (oldest, min(oldest, lowered))  # lowered only for an upload running
        self.check_nothing_unreferenced_below(retained, floor)
        assert self.env.commit_log().batch_ids() == retained

    def check_loads(self, batches: list[int]) -> None:
        reader = self.env.provider(self.env.backend())
        for batch in batches:
            info = self.infos[batch]
            for target in (info, info.unique_id):
                store = reader.get_store(info.version, target)
                assert state_of(store) == self.models[batch], (batch, target)
                store.abort()

    def check_nothing_unreferenced_below(self, batches: list[int], floor: int) -> None:
        infos = [self.infos[b] for b in batches]
        referenced = {path for info in infos for path in info.changelog.paths}
        referenced |= {info.materialized.manifest_path for info in infos if info.materialized}
        listing = list_store_dir(self.env.storage, STORE)
        kept = {obj.path for name, obj in listing.manifests
                if obj.path in referenced or name.version >= floor}
        for name, obj in [*listing.changelogs, *listing.manifests]:
            assert name.version >= floor or obj.path in referenced, obj.path
        named = set()
        for path in kept:
            manifest = self.env.storage.loop.run(aread_manifest(self.env.storage, path))
            named |= {f.dfs_path for f in manifest.files}
        for obj in listing.data_files:
            version = parse_uploaded_version(obj.path.rsplit("/", 1)[-1])
            assert version is not None and (version >= floor or obj.path in named), obj.path


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=operations)
def test_every_retained_checkpoint_loads_after_cleanup(
        history: list[Operation]) -> None:
    periodic = MaterializerOptions(interval=None, every_n_commits=3)
    with tempfile.TemporaryDirectory() as directory:
        env = file_env(Path(directory), materialization=periodic)
        try:
            driver = Driver(env)
            for kind, change, arg in history:
                if kind == "restart":
                    driver.restart()
                elif kind == "cleanup":
                    assert isinstance(arg, int)
                    driver.cleanup(arg)
                else:
                    driver.attempt(change, kind, bool(arg))
            driver.cleanup(2)
        finally:
            env.close()
