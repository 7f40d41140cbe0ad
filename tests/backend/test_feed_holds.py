"""Change feed positions hold back cleanup: the batches a feed still needs stay beyond the
retained ones, up to a bound; a feed further behind is let go, and the report names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.ops.feed_holds import (
    feed_positions,
    forget_other_positions,
    record_position,
    retention_with_feeds,
)
from tests.support.backend import BackendEnv, entry_of, file_env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


def commit_batches(env: BackendEnv, count: int) -> list[StoreCommit]:
    provider = env.provider(env.backend())
    infos: list[StoreCommit] = []
    for batch in range(count):
        base = infos[-1] if infos else None
        store = provider.get_store(base.version if base else 0, base)
        store.put(b"k", b"%d" % batch)
        infos.append(store.commit())
        env.commit_log().write(batch, entry_of(batch, infos[-1]))
    return infos


def test_a_feed_within_the_bound_keeps_the_batches_from_its_position() -> None:
    kept = retention_with_feeds(list(range(10)), 2, {"mirror": 4}, limit=10)
    assert (kept.batches, dict(kept.held), dict(kept.released)) == (6, {"mirror": 4}, {})


def test_a_feed_beyond_the_bound_is_let_go_and_keeps_nothing() -> None:
    kept = retention_with_feeds(list(range(10)), 2, {"late": 1, "mirror": 7}, limit=5)
    assert (kept.batches, dict(kept.held), dict(kept.released)) == (3, {"mirror": 7},
                                                                    {"late": 1})


def test_a_feed_that_caught_up_holds_nothing_back() -> None:
    assert retention_with_feeds(list(range(10)), 2, {"mirror": 10}, limit=5).batches == 2


def test_a_position_is_the_newest_record_and_the_others_can_go(env: BackendEnv) -> None:
    for position in (0, 3, 5):
        record_position(env.storage, "mirror", position)
    record_position(env.storage, "mirror", 5)  # again, as a retried commit does: it stands
    record_position(env.storage, "audit", 2)
    assert feed_positions(env.storage) == {"audit": 2, "mirror": 5}
    assert forget_other_positions(env.storage, "mirror", 5) == 2
    assert env.paths("feeds/") == ["feeds/audit/2.json", "feeds/mirror/5.json"]


def test_a_damaged_position_record_is_named(env: BackendEnv) -> None:
    record_position(env.storage, "mirror", 4)
    env.replace("feeds/mirror/4.json", b'{"magic": "DSTL-FEED-POSITION"}')
    with pytest.raises(CorruptCheckpointError, match=r"change feed position "
                                                     r"'feeds/mirror/4.json'"):
        feed_positions(env.storage)


def test_cleanup_keeps_the_entries_and_changelogs_a_feed_still_needs(env: BackendEnv) -> None:
    infos = commit_batches(env, 8)
    record_position(env.storage, "mirror", 3)
    report = cleanup_checkpoint(env.storage, 2, dry_run=False, incomplete_grace=0,
                                lease=env.lease(), feed_hold_limit=10)
    assert report.retention is not None and dict(report.retention.held) == {"mirror": 3}
    assert env.commit_log().batch_ids() == [3, 4, 5, 6, 7]
    for info in infos[3:]:
        assert all(env.paths(path) for path in info.changelog.paths)


def test_cleanup_lets_go_of_a_feed_beyond_the_bound(env: BackendEnv) -> None:
    commit_batches(env, 8)
    record_position(env.storage, "mirror", 1)
    report = cleanup_checkpoint(env.storage, 2, dry_run=False, incomplete_grace=0,
                                lease=env.lease(), feed_hold_limit=3)
    assert report.retention is not None and dict(report.retention.released) == {"mirror": 1}
    assert env.commit_log().batch_ids() == [6, 7]
