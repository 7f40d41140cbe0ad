"""Every stored grouping key starts with its key group, pmod(Spark's hash of the key, G), and
the stage sends each row to the partition owning its group (real PySpark, local[2,4])."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.rescale.key_groups import (
    GROUP_WIDTH,
    KEY_GROUPS,
    LAYOUT,
    key_groups_in,
    owner,
)
from pyspark_dstl.spark import read_state, stateful
from pyspark_dstl.spark.codec.values import (
    decode_key,
    encode_user_key,
    encode_value,
    pack_key,
    split_map_key,
)
from pyspark_dstl.spark.time.timers import (
    BY_EXPIRY_CF,
    BY_KEY_CF,
    EXPIRY_WIDTH,
    expiry_bytes,
)
from tests.support.backend import OPERATOR, file_env
from tests.support.key_groups import (
    FAR_MS,
    OUTPUT_SCHEMA,
    PassedKeysProcessor,
    ProbeProcessor,
    stored_keys,
)

pytestmark = pytest.mark.spark

# key columns as SQL over spark.range(40): one bigint, one string, a string and an int; each
# with a null key
KEY_FRAMES = {
    "bigint": (["k"], ["CASE WHEN id = 3 THEN NULL ELSE id * 7919 - 100 END AS k"]),
    "string": (["k"], ["CASE WHEN id = 5 THEN NULL ELSE concat('user-é', id) END AS k"]),
    "string, int": (["a", "b"], ["concat('u', id % 9) AS a",
                                 "CAST(CASE WHEN id % 5 = 0 THEN NULL ELSE id % 4 END AS INT) "
                                 "AS b"]),
}


def key_frame(spark: Any, kind: str) -> tuple[Any, list[str]]:
    columns, exprs = KEY_FRAMES[kind]
    return spark.range(40).selectExpr(*exprs, "id AS v"), columns


def sparks_groups(df: Any, columns: list[str]) -> dict[tuple[Any, ...], int]:
    """pmod(hash(key columns), KEY_GROUPS) of every distinct key, computed by Spark."""
    from pyspark.sql import functions as F

    rows = (df.select(*columns, F.pmod(F.hash(*columns), F.lit(KEY_GROUPS)).alias("__g"))
            .distinct().collect())
    return {tuple(row[c] for c in columns): int(row["__g"]) for row in rows}


def run_batch(df: Any, columns: list[str], processor: Any, checkpoint: Path,
              partitions: int) -> CommitEntry:
    """One batch of the stateful stage over `df`, committed; its commit entry."""
    stream = (stateful(df).group_by(*columns)
              .process(processor, OUTPUT_SCHEMA, checkpoint_location=str(checkpoint),
                       partitions=partitions, time_mode="processing_time"))
    stream.operator.process_batch(df, 0)
    return stream.operator.commit_log().read(0)


def group_at(key: bytes, offset: int = 0) -> int:
    return int.from_bytes(key[offset:offset + GROUP_WIDTH], "big")


@pytest.mark.parametrize("kind", list(KEY_FRAMES))
def test_stored_keys_start_with_the_group_sparks_hash_gives(spark: Any, tmp_path: Path,
                                                            kind: str) -> None:
    df, columns = key_frame(spark, kind)
    expected = sparks_groups(df, columns)
    entry = run_batch(df, columns, ProbeProcessor(), tmp_path / "ckpt", 3)
    stores = stored_keys((tmp_path / "ckpt").as_uri(), str(tmp_path / "read"), entry)
    values = {decode_key(key): group_at(key) for cfs in stores.values()
              for key in cfs.get("value/count", [])}
    assert values == expected
    maps = {split_map_key(key, "seen")[0]: group_at(key) for cfs in stores.values()
            for key in cfs.get("map/seen", [])}
    assert maps == expected


def test_the_timer_index_by_expiry_holds_the_group_after_the_expiry(spark: Any,
                                                                    tmp_path: Path) -> None:
    df, columns = key_frame(spark, "string, int")
    expected = sparks_groups(df, columns)
    entry = run_batch(df, columns, ProbeProcessor(), tmp_path / "ckpt", 3)
    stores = stored_keys((tmp_path / "ckpt").as_uri(), str(tmp_path / "read"), entry)
    by_expiry = [key for cfs in stores.values() for key in cfs.get(BY_EXPIRY_CF, [])]
    assert {key[:EXPIRY_WIDTH] for key in by_expiry} == {expiry_bytes(FAR_MS)}
    assert {decode_key(key[EXPIRY_WIDTH:]): group_at(key, EXPIRY_WIDTH)
            for key in by_expiry} == expected
    by_key = [key for cfs in stores.values() for key in cfs.get(BY_KEY_CF, [])]
    assert {decode_key(key[:-EXPIRY_WIDTH]): group_at(key) for key in by_key} == expected


@pytest.mark.parametrize("partitions", [3, 7, 200])
def test_every_key_is_stored_in_the_partition_owning_its_group(spark: Any, tmp_path: Path,
                                                               partitions: int) -> None:
    df = spark.range(600).selectExpr("concat('user-', id % 300) AS user", "id AS v")
    expected = sparks_groups(df, ["user"])
    entry = run_batch(df, ["user"], ProbeProcessor(), tmp_path / "ckpt", partitions)
    assert key_groups_in(entry.extra) == KEY_GROUPS
    assert entry.extra[LAYOUT] == {"key_groups": KEY_GROUPS}
    stores = stored_keys((tmp_path / "ckpt").as_uri(), str(tmp_path / "read"), entry)
    placed = {decode_key(key): partition for partition, cfs in stores.items()
              for key in cfs.get("value/count", [])}
    assert set(placed) == set(expected)
    for key, partition in placed.items():
        assert partition == int(owner(expected[key], partitions, KEY_GROUPS))


@pytest.mark.parametrize("kind", list(KEY_FRAMES))
def test_keys_a_processor_passes_are_stored_as_the_batchs_keys(spark: Any, tmp_path: Path,
                                                               kind: str) -> None:
    df, columns = key_frame(spark, kind)
    entry = run_batch(df, columns, PassedKeysProcessor(), tmp_path / "ckpt", 3)
    stores = stored_keys((tmp_path / "ckpt").as_uri(), str(tmp_path / "read"), entry)
    for cfs in stores.values():
        assert cfs.get("value/passed", []) == cfs.get("value/batch", [])
        assert [key[:-EXPIRY_WIDTH] for key in cfs.get(BY_KEY_CF, [])] == cfs.get("value/batch", [])
    assert sum(len(cfs.get("value/batch", [])) for cfs in stores.values()) == \
        len(sparks_groups(df, columns))


def _state_by_kind(frame: Any) -> dict[str, set[tuple[Any, ...]]]:
    found: dict[str, set[tuple[Any, ...]]] = {}
    for row in frame.itertuples():
        found.setdefault(row.kind, set()).add(
            (tuple(json.loads(row.key)), None if row.map_key is None else json.loads(row.map_key),
             json.loads(row.value)))
    return found


def test_the_state_reader_shows_grouped_keys_without_their_group(spark: Any,
                                                                 tmp_path: Path) -> None:
    df, columns = key_frame(spark, "string, int")
    run_batch(df, columns, ProbeProcessor(), tmp_path / "ckpt", 3)
    state = _state_by_kind(read_state(spark, str(tmp_path / "ckpt")).toPandas())
    counts = df.groupBy(*columns).count().collect()
    model = {(tuple(row[c] for c in columns), None, row["count"]) for row in counts}
    assert state["value"] == model
    assert state["map"] == {(key, "x", count) for key, _, count in model}
    assert state["timer"] == {(key, None, FAR_MS) for key, _, _ in model}


def test_the_state_reader_reads_a_batch_written_before_key_groups(spark: Any,
                                                                  tmp_path: Path) -> None:
    env = file_env(tmp_path)
    store = env.provider(env.backend(), 0).get_store(0)
    for user, count in (("a", 1), ("b", 2)):
        key = pack_key([user])  # the layout before key groups: no group in front
        store.put(key, encode_value(count, None, "count"), "value/count")
        store.put(key + encode_user_key("x", "seen"), encode_value(count, None, "seen"),
                  "map/seen")
        store.put(key + expiry_bytes(5), b"", BY_KEY_CF)
        store.put(expiry_bytes(5) + key, b"", BY_EXPIRY_CF)
    info = store.commit()
    env.commit_log().write(0, CommitEntry(0, {OPERATOR: OperatorCommit(1, {0: info})},
                                          extra={"key_columns": ["user"]}))
    env.close()
    frame = read_state(spark, str(tmp_path / "ckpt"), operator=OPERATOR).toPandas()
    assert _state_by_kind(frame) == {
        "value": {(("a",), None, 1), (("b",), None, 2)},
        "map": {(("a",), "x", 1), (("b",), "x", 2)},
        "timer": {(("a",), None, 5), (("b",), None, 5)}}
