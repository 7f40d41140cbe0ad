"""DSTL_KILL_POINT: which settings name a kill point, and which are refused."""

from __future__ import annotations

import pytest

from pyspark_dstl.backend.faults import KillPointError, parse_spec


def test_an_unset_or_blank_variable_arms_no_kill_point() -> None:
    assert parse_spec(None) is None
    assert parse_spec("  ") is None


def test_a_point_with_a_count_fires_at_that_call_and_without_one_at_the_first() -> None:
    assert parse_spec("commit_log_after:3") == ("commit_log_after", 3)
    assert parse_spec("cleanup_delete") == ("cleanup_delete", 1)


@pytest.mark.parametrize("raw", ["no_such_point:1", "commit_log_after:0", "commit_log_after:x",
                                 "commit_log_after:-2", ":1"])
def test_an_unknown_point_or_a_bad_count_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(KillPointError, match="DSTL_KILL_POINT"):
        parse_spec(raw)

