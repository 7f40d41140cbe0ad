"""Spark's hash() computed in Python equals Spark's own, so an offline rescale puts every key
where the stateful stage's `pmod(hash(keys), n)` sends it."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import numpy as np
import pytest

from pyspark_dstl.backend.rescale.key_groups import GROUP_WIDTH
from pyspark_dstl.spark.codec.values import encode_key, encode_user_key, pack_key
from pyspark_dstl.spark.keys.key_routing import HashLayoutMigration, single_ints
from pyspark_dstl.spark.keys.spark_hash import (
    hash_longs,
    partition_of,
    spark_hash,
)
from pyspark_dstl.spark.spark_errors import PartitioningError
from pyspark_dstl.spark.time.timers import BY_EXPIRY_CF, BY_KEY_CF, expiry_bytes

ROWS = 2000


def _random_text(rng: random.Random) -> str:
    alphabet = "abcXYZ09 é漢🙂\u0000"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 13)))


def _rows(seed: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    special_doubles = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-310]
    rows = []
    for i in range(ROWS):
        rows.append((
            None if i % 17 == 0 else rng.randrange(-2**31, 2**31),
            None if i % 19 == 0 else rng.randrange(-2**63, 2**63),
            None if i % 23 == 0 else _random_text(rng),
            rng.choice(special_doubles) if i % 7 == 0 else rng.uniform(-1e9, 1e9),
            rng.choice([True, False]),
            bytes(rng.randrange(256) for _ in range(rng.randrange(0, 10))),
            dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-20000, 40000)),
            dt.datetime(2001, 2, 3, tzinfo=dt.UTC) + dt.timedelta(
                microseconds=rng.randrange(-10**15, 10**15)),
            float(np.float32(rng.uniform(-1e5, 1e5))) if i % 5 else rng.choice(special_doubles),
            rng.randrange(-128, 128),
            dt.datetime(2001, 2, 3) + dt.timedelta(microseconds=rng.randrange(-10**15, 10**15)),
            rng.randrange(-2**15, 2**15),
        ))
    return rows


COLUMNS = [("i", "int"), ("l", "bigint"), ("s", "string"), ("d", "double"), ("b", "boolean"),
           ("bin", "binary"), ("day", "date"), ("ts", "timestamp"), ("f", "float"),
           ("t", "tinyint"), ("ntz", "timestamp_ntz"), ("sh", "smallint")]


@pytest.fixture(scope="module")
def hashed(spark: Any) -> list[Any]:
    """Every row with Spark's hash of each column alone, of all columns, and of (l, s)."""
    from pyspark.sql import functions as F

    schema = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    frame = spark.createDataFrame(_rows(5), schema)
    names = [name for name, _ in COLUMNS]
    return frame.select(
        *names, *[F.hash(F.col(name)).alias(f"h_{name}") for name in names],
        F.hash(*[F.col(name) for name in names]).alias("h_all"),
        F.hash("l", "s").alias("h_ls"),
        F.pmod(F.hash("l", "s"), F.lit(7)).alias("p7")).collect()


@pytest.mark.spark
@pytest.mark.parametrize(("name", "kind"), COLUMNS, ids=[kind for _, kind in COLUMNS])
def test_each_column_type_hashes_as_spark_does(hashed: list[Any], name: str,
                                               kind: str) -> None:
    for row in hashed:
        assert spark_hash([row[name]], [kind]) == row[f"h_{name}"], (kind, row[name])


@pytest.mark.spark
def test_several_columns_chain_their_hashes_as_spark_does(hashed: list[Any]) -> None:
    kinds = [kind for _, kind in COLUMNS]
    names = [name for name, _ in COLUMNS]
    for row in hashed:
        assert spark_hash([row[n] for n in names], kinds) == row["h_all"]


@pytest.mark.spark
def test_partition_is_spark_pmod_of_the_hash(hashed: list[Any]) -> None:
    for row in hashed:
        assert partition_of([row["l"], row["s"]], ["bigint", "string"], 7) == row["p7"]


@pytest.mark.spark
def test_numpy_longs_hash_as_spark_does(hashed: list[Any]) -> None:
    rows = [row for row in hashed if row["l"] is not None]
    values = np.array([row["l"] for row in rows], dtype=np.int64)
    assert hash_longs(values).tolist() == [row["h_l"] for row in rows]


def test_a_key_type_without_a_hash_is_refused_by_name() -> None:
    with pytest.raises(PartitioningError, match=r"'decimal.*supported"):
        spark_hash([1], ["decimal(10,2)"])


def test_a_key_with_another_number_of_columns_is_refused() -> None:
    with pytest.raises(PartitioningError, match=r"2 value.*1 key column"):
        spark_hash([1, 2], ["bigint"])


EDGE_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, -1, -32,
             -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63]


def test_one_integer_keys_decode_in_numpy_as_msgpack_reads_them() -> None:
    rng = random.Random(3)
    numbers = EDGE_INTS + [rng.randrange(-2**63, 2**63) for _ in range(500)]
    keys = [encode_key([n], n % 4096) for n in numbers]  # the msgpack array follows the group
    assert single_ints(keys, GROUP_WIDTH).tolist() == numbers
    assert single_ints([b"12345678" + k for k in keys], 8 + GROUP_WIDTH).tolist() == numbers
    assert single_ints([k + encode_user_key(("a", 1), "m") for k in keys],
                       GROUP_WIDTH).tolist() == numbers


def test_keys_that_are_not_one_integer_are_left_to_the_key_by_key_decoding() -> None:
    assert single_ints([encode_key([1], 7), encode_key(["a"], 7)], GROUP_WIDTH) is None
    assert single_ints([encode_key([1, 2], 7)], GROUP_WIDTH) is None
    assert single_ints([encode_key([None], 7)], GROUP_WIDTH) is None
    assert single_ints([encode_key([1], 7)[:GROUP_WIDTH + 1]], GROUP_WIDTH) is None


def test_the_migration_gives_each_hash_layout_key_its_group_and_the_groups_owner() -> None:
    # keys stored without key groups (the hash layout): pack_key
    numbers = EDGE_INTS + list(range(-300, 300))
    migration = HashLayoutMigration(["bigint"], 7, 4096)
    groups = [spark_hash([n], ["bigint"]) % 4096 for n in numbers]
    owners = [g * 7 // 4096 for g in groups]
    keys = [pack_key([n]) for n in numbers]
    grouped = [encode_key([n], g) for n, g in zip(numbers, groups, strict=True)]
    for cf, stored, placed in (
            ("value/count", keys, grouped),
            (BY_EXPIRY_CF, [expiry_bytes(5) + k for k in keys],
             [expiry_bytes(5) + k for k in grouped]),
            (BY_KEY_CF, [k + expiry_bytes(5) for k in keys],
             [k + expiry_bytes(5) for k in grouped])):
        partitions, rewritten = migration(cf, stored)
        assert partitions.tolist() == owners and list(rewritten) == placed
    pairs = HashLayoutMigration(["string", "bigint"], 5, 4096)
    composite = [pack_key([f"u{n}", n]) + encode_user_key(1, "m") for n in numbers]
    expected = [spark_hash([f"u{n}", n], ["string", "bigint"]) % 4096 * 5 // 4096
                for n in numbers]
    assert pairs("map/m", composite)[0].tolist() == expected
