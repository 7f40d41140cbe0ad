"""A checkpoint as backend.spark writes it (grouping keys hashed to partitions by Spark's hash),
built without Spark, and the checks of a rescale: one whole layout holding exactly the content,
every key in the partition Spark's hash assigns. Shared by the rescale tests and the soak."""

from __future__ import annotations

from pyspark_dstl.backend.lineage.checkpoint import CheckpointInfo
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.spark.codec.key_routing import grouping_key
from pyspark_dstl.backend.spark.codec.spark_hash import partition_of
from pyspark_dstl.backend.spark.codec.values import encode_key, encode_user_key, encode_value
from pyspark_dstl.backend.spark.time.timers import BY_EXPIRY_CF, BY_KEY_CF, expiry_bytes
from tests.support.backend import OPERATOR, BackendEnv

Row = tuple[str, bytes, bytes]
Content = set[Row]
KEY_TYPES = ["string"]


def users(count: int) -> list[str]:
    return [f"user-{i}" for i in range(count)]


def stored_rows(user: str, i: int) -> list[Row]:
    """What the stateful stage stores for one key: a value, a map entry and a timer."""
    key = encode_key([user])
    expiry = expiry_bytes(1_000 * i)
    return [("value/count", key, encode_value(i, None, "count")),
            ("map/seen", key + encode_user_key(("a", i), "seen"), encode_value(True, None, "s")),
            (BY_KEY_CF, key + expiry, b""), (BY_EXPIRY_CF, expiry + key, b"")]


def build_checkpoint(env: BackendEnv, partitions: int, names: list[str], batches: int = 2,
                     key_types: list[str] | None = KEY_TYPES) -> Content:
    """`batches` committed batches over `partitions`, each key where Spark's hash puts it;
    the lease is let go afterwards (the root looks like a stopped query's)."""
    backend = env.backend()
    infos: dict[int, CheckpointInfo] = {}
    for batch_id in range(batches):
        for partition in range(partitions):
            base = infos.get(partition)
            store = env.provider(backend, partition).get_store(
                base.version if base else 0, base)
            for i, user in enumerate(names):
                if i % batches == batch_id and \
                        partition_of([user], KEY_TYPES, partitions) == partition:
                    for cf, key, value in stored_rows(user, i):
                        store.put(key, value, cf)
            infos[partition] = store.commit(materialize=batch_id == 0)
        extra: dict[str, object] = {"key_columns": ["user"]}
        if key_types is not None:
            extra["key_types"] = key_types
        env.commit_log().write(batch_id, CommitEntry(
            batch_id, {OPERATOR: OperatorCommit(partitions, dict(infos))}, extra=extra))
    env.close()
    return {row for i, user in enumerate(names) for row in stored_rows(user, i)}


def latest_entry(env: BackendEnv) -> CommitEntry:
    found = env.commit_log().latest()
    env.close()
    if found is None:
        raise AssertionError(f"{env.url}: no committed batch")
    return found[1]


def content_by_partition(env: BackendEnv, entry: CommitEntry) -> dict[int, Content]:
    backend = env.backend()
    result: dict[int, Content] = {}
    for partition, info in entry.operators[OPERATOR].stores.items():
        store = env.provider(backend, partition).get_store(info.version, info)
        result[partition] = {(cf, key, value) for cf in store.column_families()
                             for key, value in store.iterator(cf)}
        store.abort()
    env.close()
    return result


def check_layout(env: BackendEnv, content: Content, partitions: int | None = None) -> int:
    """The newest entry's stores (`partitions` of them, if given) hold exactly `content`, each
    key in the partition Spark's hash assigns; returns the partition count."""
    entry = latest_entry(env)
    count = entry.operators[OPERATOR].num_partitions
    if partitions is not None and count != partitions:
        raise AssertionError(f"{env.url}: {count} partitions, expected {partitions}")
    stored = content_by_partition(env, entry)
    if sorted(stored) != list(range(count)):
        raise AssertionError(f"{env.url}: stores of partitions {sorted(stored)} in a layout "
                             f"of {count}")
    union: Content = set().union(*stored.values())
    if union != content or sum(len(rows) for rows in stored.values()) != len(content):
        raise AssertionError(f"{env.url}: {len(union - content)} row(s) not in the model, "
                             f"{len(content - union)} missing, or a row in two partitions")
    for partition, rows in stored.items():
        for cf, key, _ in rows:
            if partition_of(grouping_key(cf, key), KEY_TYPES, count) != partition:
                raise AssertionError(f"{env.url}: {cf} key {key[:30]!r} in partition "
                                     f"{partition} of {count}")
    return count
