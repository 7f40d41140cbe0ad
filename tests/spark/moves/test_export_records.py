"""The export's records (spark/moves/export_records.py): which processing time Spark writes each
TTL'd value at, so that Spark's expiry (its batch's processing time plus the TTL) is the one the
location held. Spark's whole round trip is tested in test_export_state.py."""

from __future__ import annotations

from typing import Any

import msgpack

from pyspark_dstl.spark.codec.values import encode_key, encode_value
from pyspark_dstl.spark.moves.export_records import _records, write_time

NOW_MS = 10_000  # the processing time of the location's last batch
TTL_MS = 1_000


def timed(ttl: int | None) -> Any:
    """The rule records_of_store applies to one variable whose TTL is `ttl`."""
    return lambda name, expiry: write_time(expiry, ttl, NOW_MS)


def list_records(expiries: list[int]) -> list[tuple[int | None, int | None]]:
    """(position, write time) of each exported element of one stored list."""
    raw = b"".join(encode_value([i], expiry, "items") for i, expiry in enumerate(expiries))
    rows = _records("list", "list/items", "items", encode_key(("a",), 0), raw, True,
                    {"items": 0}, lambda name, stored: msgpack.packb(stored), timed(TTL_MS))
    return [(row[2], at) for row, at, _ in rows]


def test_each_element_is_written_at_its_expiry_less_the_ttl() -> None:
    assert list_records([10_500, 10_700, 11_000]) == [(0, 9_500), (1, 9_700), (2, 10_000)]


def test_expired_elements_are_left_out_and_the_list_keeps_its_order() -> None:
    # written under a longer TTL before: the first element's time comes after the second's
    assert list_records([9_000, 10_900, 10_200, 10_400]) == [(1, 9_900), (2, 9_900),
                                                             (3, 9_900)]


def test_a_time_after_the_last_batch_is_held_to_the_last_batch() -> None:
    assert list_records([10_100, 12_500]) == [(0, 9_100), (1, 10_000)]


def test_a_value_without_ttl_and_a_timer_have_no_write_time() -> None:
    value = list(_records("value", "value/count", "count", encode_key(("a",), 0),
                          encode_value([3], None, "count"), True, {"count": 0},
                          lambda name, stored: msgpack.packb(stored), timed(None)))
    assert [(row[1], at) for row, at, _ in value] == [(0, None)]
