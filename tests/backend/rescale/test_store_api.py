"""What a rescale builds on in the store API: an empty store numbered after a version, keys
ingested straight into its engine, committed as a snapshot alone (no changelog file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import StateStoreClosedError
from pyspark_dstl.backend.store.provider import ChangelogProvider
from tests.support.backend import PROVIDER_IDS, PROVIDERS, BackendEnv, file_env

KEYS = [b"k%03d" % i for i in range(50)]


@pytest.fixture(params=PROVIDERS, ids=PROVIDER_IDS)
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BackendEnv]:
    made = file_env(tmp_path, provider_class=request.param)
    yield made
    made.close()


def provider(env: BackendEnv) -> ChangelogProvider:
    found = env.provider(env.backend())
    assert isinstance(found, ChangelogProvider)
    return found


def test_an_ingested_store_commits_the_next_version_as_a_snapshot_alone(
        env: BackendEnv) -> None:
    store = provider(env).get_empty_store_after(41)
    store.ingest("value/count", KEYS, [b"v"] * len(KEYS))
    info = store.commit(materialize=True)
    assert (info.version, info.base_unique_id, info.lineage) == (42, None, ())
    assert info.materialized is not None and info.materialized.version == 42
    assert info.changelog.size == 0
    assert not [p for p in env.paths("state") if p.endswith(".changelog")]
    again = env.provider(env.backend()).get_store(42, info)
    assert dict(again.iterator("value/count")) == dict.fromkeys(KEYS, b"v")
    again.abort()


def test_the_version_after_an_ingested_one_builds_on_its_snapshot(env: BackendEnv) -> None:
    first = provider(env)
    store = first.get_empty_store_after(7)
    store.ingest("value/count", KEYS, [b"v"] * len(KEYS))
    info = store.commit(materialize=True)
    following = first.get_store(8, info)
    following.put(b"new", b"1", "value/count")
    later = following.commit()
    assert (later.version, later.base_unique_id, later.lineage) == (
        9, info.unique_id, ((9, later.unique_id),))
    restored = env.provider(env.backend()).get_store(9, later)
    assert len(dict(restored.iterator("value/count"))) == len(KEYS) + 1
    restored.abort()


def test_an_ingested_store_cannot_commit_without_a_snapshot(env: BackendEnv) -> None:
    store = provider(env).get_empty_store_after(3)
    store.ingest("value/count", KEYS, [b"v"] * len(KEYS))
    with pytest.raises(StateStoreClosedError, match=r"commit\(materialize=True\)"):
        store.commit()


def test_ingest_is_refused_into_a_transaction_with_other_writes(env: BackendEnv) -> None:
    store = provider(env).get_empty_store_after(3)
    store.put(b"a", b"1", "value/count")
    with pytest.raises(StateStoreClosedError, match="without other writes"):
        store.ingest("value/count", KEYS, [b"v"] * len(KEYS))
    store.abort()


def test_a_write_after_an_ingest_makes_the_commit_refused(env: BackendEnv) -> None:
    store = provider(env).get_empty_store_after(3)
    store.ingest("value/count", KEYS, [b"v"] * len(KEYS))
    store.put(b"a", b"1", "value/count")
    with pytest.raises(StateStoreClosedError, match="no other writes"):
        store.commit(materialize=True)


def test_chunked_reads_of_a_column_family_return_what_its_iterator_returns(
        env: BackendEnv) -> None:
    first = provider(env)
    store = first.get_store(0)
    for cf in ("value/a", "value/b", "value/a\xff"):
        store.put_many([(key + cf.encode(), b"v" + key) for key in KEYS], cf=cf)
    store.put(b"\xff\xff", b"last", "value/a")
    info = store.commit()
    reader = env.provider(env.backend()).get_store(1, info)
    for cf in ("value/a", "value/b", "value/a\xff"):
        chunks = list(reader.iterator_chunks(cf, 7))
        assert all(len(keys) == len(values) <= 7 for keys, values in chunks)
        flat = [(k, v) for keys, values in chunks for k, v in zip(keys, values, strict=True)]
        assert flat == list(reader.iterator(cf))
    reader.abort()


def test_the_end_of_a_key_prefix_is_the_next_key_above_all_it_starts() -> None:
    from pyspark_dstl.backend.engines.records import prefix_end

    assert prefix_end(b"value/a\x00") == b"value/a\x01"
    assert prefix_end(b"a\xff\xff") == b"b"
    assert prefix_end(b"\xff") is None
