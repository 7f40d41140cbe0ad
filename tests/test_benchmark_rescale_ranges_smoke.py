"""The range-rescale benchmark runs end to end in its --quick form (as its docstring shows it,
in a subprocess, JSON to a temporary directory), and what it times is a correct rescale: its
own verification passed and the keys it copied one by one are exactly the share of the new
partitions that their cloned old store does not hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks.rescale_ranges import (
    COPY_MODES,
    KEY_GROUPS,
    PHASES,
    PRODUCT,
    QUICK,
    group_owner,
    group_range,
    key_groups,
    pieces,
)
from tests.support.benchmark_runs import run_quick

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_quick("rescale_ranges", tmp_path_factory.mktemp("rescale-ranges"))


def _rounds(result: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = result["samples"][f"ranges {mode}"]
    return rounds


def test_the_record_names_its_command_and_both_copy_modes(result: dict[str, Any]) -> None:
    assert result["command"].startswith("python -m benchmarks.rescale_ranges --quick")
    assert set(result["samples"]) == {"restore", *(f"ranges {m}" for m in COPY_MODES),
                                      PRODUCT, "restore (today's layout)", "today"}


def test_every_key_ends_in_the_partition_its_key_group_assigns(result: dict[str, Any]) -> None:
    keys, new = QUICK["keys"], QUICK["to"]
    owners = group_owner(key_groups(np.arange(keys, dtype=np.int64)), new)
    expected = {str(p): int((owners == p).sum()) for p in range(new)}
    for mode in COPY_MODES:
        verified = _rounds(result, mode)[0]["verified"]
        assert verified["passed"] and verified["keys"] == keys
        assert verified["keys_per_partition"] == expected
        assert verified["values_checked"] > 0


def test_only_the_groups_the_clone_lacks_are_copied_key_by_key(result: dict[str, Any]) -> None:
    groups = key_groups(np.arange(QUICK["keys"], dtype=np.int64))
    copied = sum(int(((groups >= lo) & (groups < hi)).sum())
                 for p in range(QUICK["to"])
                 for _, lo, hi in pieces(p, QUICK["from"], QUICK["to"])[1:])
    assert copied > 0
    for mode in COPY_MODES:
        assert _rounds(result, mode)[0]["keys_copied"] == copied


def test_sharing_the_old_files_uploads_less_than_uploading_every_live_file(
        result: dict[str, Any]) -> None:
    for mode in COPY_MODES:
        run = _rounds(result, mode)[0]
        assert 0 < run["bytes_written"] < run["unshared_bytes_written"]
        assert run["unshared_bytes_written"] == run["bytes_referenced"]
        assert all(run[f"{phase}_seconds"] > 0 for phase in PHASES)


@pytest.mark.parametrize("partitions", [1, 4, 6, 7, 1000])
def test_each_partitions_group_range_is_what_the_owner_function_assigns(partitions: int) -> None:
    owners = group_owner(np.arange(KEY_GROUPS), partitions)
    for p in range(partitions):
        lo, hi = group_range(p, partitions)
        assert list(np.flatnonzero(owners == p)) == list(range(lo, hi))


def test_the_products_rescale_puts_every_key_where_its_group_assigns_and_shares_the_base(
        result: dict[str, Any]) -> None:
    run = result["samples"][PRODUCT][0]
    assert run["verified"]["passed"] and run["verified"]["keys"] == QUICK["keys"]
    assert run["keys_copied"] == _rounds(result, "batch")[0]["keys_copied"]
    assert run["bytes_copied"] > 0 and run["bytes_uploaded"] + run["bytes_copied"] == (
        run["bytes_written"])
