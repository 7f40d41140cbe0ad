"""The key grouping of keys a processor passes, the stage's routing longs, the layout record
(no Spark needed; tests/spark/keys/test_stored_keys.py checks them against Spark)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS, key_groups_in, layout_extra
from pyspark_dstl.spark.codec.values import encode_key
from pyspark_dstl.spark.driver.operator import BatchBase, OperatorSpec, StatefulOperator
from pyspark_dstl.spark.keys.key_grouping import (
    GROUP_COLUMN,
    KeyGrouping,
    group_prefixes,
    routing_longs,
    with_group_column,
)
from pyspark_dstl.spark.keys.spark_hash import hash_longs, spark_hash
from pyspark_dstl.spark.query_settings import DstlSettings
from pyspark_dstl.spark.spark_errors import CommitValidationError, PartitioningError
from tests.support.spark import CountProcessor


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 200, 4096])
def test_each_routing_long_hashes_to_its_partition(partitions: int) -> None:
    longs = np.array(routing_longs(partitions), dtype=np.int64)
    assert (longs >= 0).all()
    assert (hash_longs(longs).astype(np.int64) % partitions).tolist() == list(range(partitions))


def test_bigint_keys_are_grouped_in_numpy_as_key_by_key() -> None:
    grouping = KeyGrouping(("bigint",), KEY_GROUPS)
    keys = [(n,) for n in [0, 1, -1, 2**63 - 1, -2**63, 123456789012]]
    assert grouping.groups_of(keys).tolist() == \
        [spark_hash(key, ["bigint"]) % KEY_GROUPS for key in keys]
    with_null = [(1,), (None,)]
    assert grouping.groups_of(with_null).tolist() == [spark_hash([1], ["bigint"]) % KEY_GROUPS,
                                                      spark_hash([None], ["bigint"]) % KEY_GROUPS]


def test_encoded_keys_are_their_group_then_the_msgpack_array() -> None:
    grouping = KeyGrouping(("string", "int"), KEY_GROUPS)
    key = ("u1", 3)
    assert grouping.encode([key]) == [encode_key(key, grouping.group_of(key))]


def test_a_key_type_without_a_python_hash_is_refused_when_keys_are_passed() -> None:
    grouping = KeyGrouping(("decimal(10,2)",), KEY_GROUPS)
    with pytest.raises(PartitioningError, match="decimal"):
        grouping.encode([(1,)])


def test_group_prefixes_are_two_big_endian_bytes() -> None:
    assert group_prefixes(np.array([0, 258, 4095])).to_pylist() == \
        [b"\x00\x00", b"\x01\x02", b"\x0f\xff"]
    with pytest.raises(PartitioningError, match="out of range"):
        group_prefixes(np.array([1 << 16]))


def test_the_layout_record_names_the_key_groups_and_its_absence_the_old_layout() -> None:
    assert key_groups_in(layout_extra(KEY_GROUPS)) == KEY_GROUPS
    assert key_groups_in({"key_columns": ["user"]}) is None


def test_a_table_built_outside_the_stage_gets_the_group_column_of_each_row() -> None:
    grouping = KeyGrouping(("string", "bigint"), KEY_GROUPS)
    table = pa.table({"user": ["a", None, "a", "b"], "n": [1, 2, 1, None], "v": [1, 2, 3, 4]})
    grouped = with_group_column(table, ("user", "n"), grouping)
    assert grouped.column(GROUP_COLUMN).to_pylist() == [
        grouping.group_of(key) for key in [("a", 1), (None, 2), ("a", 1), ("b", None)]]


def _operator() -> StatefulOperator:
    spec = OperatorSpec(processor=CountProcessor(), key_columns=("user",), output_schema=None,
                        location="file:///nowhere/ckpt")
    return StatefulOperator(spec, DstlSettings.from_settings({}))


def _base(extra: dict[str, object]) -> BatchBase:
    return BatchBase(4, CommitEntry(4, {"stateful": OperatorCommit(1, {})}, extra=extra))


def test_a_new_checkpoint_gets_key_groups_and_a_recorded_count_is_kept() -> None:
    assert _operator()._key_groups(BatchBase(None, None)) == KEY_GROUPS
    assert _operator()._key_groups(_base(layout_extra(1024))) == 1024


def test_state_stored_before_key_groups_is_refused_until_migrated() -> None:
    with pytest.raises(CommitValidationError, match=r"before key groups.*migrate"):
        _operator()._key_groups(_base({"key_columns": ["user"]}))
