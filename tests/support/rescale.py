"""A checkpoint as the Spark integration writes it, built without Spark: in key groups (each stored
grouping key led by its group pmod(Spark's hash, G), each in the partition owning its group), or
in the hash layout written before key groups (bare keys, each in partition pmod(Spark's hash,
n)). And the checks of a rescale: one whole layout of key groups holding exactly the content,
every key with its right group in the partition owning it. Shared by the rescale tests and the
soak."""

from __future__ import annotations

from typing import Any

import numpy as np

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_groups import (
    KEY_GROUPS,
    LAYOUT,
    group_bytes,
    groups_at,
    key_groups_in,
    owner,
)
from pyspark_dstl.spark.codec.values import encode_user_key, encode_value, pack_key
from pyspark_dstl.spark.keys.key_routing import grouping_key, key_offset
from pyspark_dstl.spark.keys.spark_hash import partition_of, spark_hash
from pyspark_dstl.spark.time.timers import BY_EXPIRY_CF, BY_KEY_CF, expiry_bytes
from tests.support.backend import OPERATOR, BackendEnv

Row = tuple[str, bytes, bytes]
Content = set[Row]
KEY_TYPES = ["string"]


def users(count: int) -> list[str]:
    return [f"user-{i}" for i in range(count)]


def key_group(user: str) -> int:
    return spark_hash([user], KEY_TYPES) % KEY_GROUPS


def stored_rows(user: str, i: int, grouped: bool = True) -> list[Row]:
    """What the stateful stage stores for one key: a value, a map entry and a timer."""
    key = pack_key([user])
    if grouped:
        key = group_bytes(key_group(user)) + key
    expiry = expiry_bytes(1_000 * i)
    return [("value/count", key, encode_value(i, None, "count")),
            ("map/seen", key + encode_user_key(("a", i), "seen"), encode_value(True, None, "s")),
            (BY_KEY_CF, key + expiry, b""), (BY_EXPIRY_CF, expiry + key, b"")]


def partition_of_user(user: str, partitions: int, grouped: bool) -> int:
    if grouped:
        return int(owner(np.array([key_group(user)]), partitions, KEY_GROUPS)[0])
    return partition_of([user], KEY_TYPES, partitions)


def build_checkpoint(env: BackendEnv, partitions: int, names: list[str], batches: int = 2,
                     key_types: list[str] | None = KEY_TYPES, grouped: bool = True) -> Content:
    """`batches` committed batches over `partitions`, each key where the layout puts it (key
    groups, or the hash layout when not `grouped`); the lease is let go afterwards (the root
    looks like a stopped query's). Returns the content in key groups either way."""
    backend = env.backend()
    infos: dict[int, StoreCommit] = {}
    for batch_id in range(batches):
        for partition in range(partitions):
            base = infos.get(partition)
            store = env.provider(backend, partition).get_store(
                base.version if base else 0, base)
            for i, user in enumerate(names):
                if i % batches == batch_id and \
                        partition_of_user(user, partitions, grouped) == partition:
                    for cf, key, value in stored_rows(user, i, grouped):
                        store.put(key, value, cf)
            infos[partition] = store.commit(materialize=batch_id == 0)
        extra: dict[str, Any] = {"key_columns": ["user"]}
        if key_types is not None:
            extra["key_types"] = key_types
        if grouped:
            extra[LAYOUT] = {"key_groups": KEY_GROUPS}
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
    """Each partition's rows, keys shown in key groups (a hash-layout key gets the group its
    hash gives, so both layouts of one state compare equal)."""
    backend = env.backend()
    grouped = key_groups_in(entry.extra) is not None
    result: dict[int, Content] = {}
    for partition, info in entry.operators[OPERATOR].stores.items():
        store = env.provider(backend, partition).get_store(info.version, info)
        result[partition] = {(cf, key if grouped else with_group(cf, key), value)
                             for cf in store.column_families()
                             for key, value in store.iterator(cf)}
        store.abort()
    env.close()
    return result


def with_group(cf: str, key: bytes) -> bytes:
    """A hash-layout key as the key-group layout stores it."""
    at = key_offset(cf)
    group = spark_hash(grouping_key(cf, key, grouped=False), KEY_TYPES) % KEY_GROUPS
    return key[:at] + group_bytes(group) + key[at:]


def check_layout(env: BackendEnv, content: Content, partitions: int | None = None,
                 grouped: bool = True) -> int:
    """The newest entry's stores (`partitions` of them, if given) hold exactly `content`: in
    key groups, each key led by the group Spark's hash gives it, in the partition owning that
    group (or, not `grouped`, in the hash layout, each key in partition pmod(hash, n));
    returns the partition count."""
    entry = latest_entry(env)
    groups = key_groups_in(entry.extra)
    if groups != (KEY_GROUPS if grouped else None):
        raise AssertionError(f"{env.url}: batch {entry.batch_id} has layout "
                             f"{entry.extra.get(LAYOUT)!r}, expected "
                             f"{'key groups' if grouped else 'the hash layout'}")
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
            group = int(groups_at([key], key_offset(cf))[0])
            if spark_hash(grouping_key(cf, key), KEY_TYPES) % KEY_GROUPS != group:
                raise AssertionError(f"{env.url}: {cf} key {key[:30]!r} has group {group}")
            expected = (int(owner(np.array([group]), count, KEY_GROUPS)[0]) if grouped
                        else partition_of(grouping_key(cf, key), KEY_TYPES, count))
            if expected != partition:
                raise AssertionError(f"{env.url}: {cf} key {key[:30]!r} (group {group}) in "
                                     f"partition {partition} of {count}")
    return count


def layout_is_grouped(env: BackendEnv) -> bool:
    return key_groups_in(latest_entry(env).extra) is not None
