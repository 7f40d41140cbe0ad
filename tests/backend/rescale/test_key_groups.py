"""Key groups: every group has exactly one owner, and owners' ranges are contiguous."""

from __future__ import annotations

import numpy as np
import pytest

from pyspark_dstl.backend.rescale.key_groups import (
    check_partitions,
    group_bytes,
    group_range,
    groups_at,
    owner,
)


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 200, 1000, 4096])
def test_each_partition_owns_the_contiguous_range_owner_names(partitions: int) -> None:
    groups = np.arange(4096)
    owners = owner(groups, partitions, 4096)
    for partition in range(partitions):
        first, end = group_range(partition, partitions, 4096)
        assert first < end
        assert (owners[first:end] == partition).all()
    assert (np.diff(owners) >= 0).all() and owners[-1] == partitions - 1


def test_group_bytes_sort_as_the_groups_do() -> None:
    assert sorted(group_bytes(g) for g in (4096, 0, 300, 255, 256)) == [
        group_bytes(g) for g in (0, 255, 256, 300, 4096)]


def test_groups_are_read_at_their_offset_without_decoding() -> None:
    keys = [b"\x00" * 8 + group_bytes(g) + b"rest" for g in (0, 1, 258, 4095)]
    assert groups_at(keys, 8).tolist() == [0, 1, 258, 4095]
    assert groups_at([group_bytes(7) + b"x"], 0).tolist() == [7]


def test_a_key_too_short_for_its_group_is_named() -> None:
    with pytest.raises(ValueError, match="too short"):
        groups_at([b"\x01"], 0)


def test_more_partitions_than_key_groups_are_refused() -> None:
    check_partitions(4096, 4096)
    with pytest.raises(ValueError, match="1 to 4096"):
        check_partitions(4097, 4096)
