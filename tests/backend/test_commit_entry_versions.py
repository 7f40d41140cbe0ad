"""Commit entries whose stored keys carry key groups are written in a format version that
releases from before key groups refuse by name; every other entry stays readable by them."""

from __future__ import annotations

import json

import pytest

from pyspark_dstl.backend.backend_errors import CommitLogCorruptError
from pyspark_dstl.backend.lineage.commit_entry import (
    FENCE_MAGIC,
    LAYOUT,
    MAGIC,
    CommitEntry,
    Fence,
    decode_entry,
    decode_record,
    encode_entry,
    encode_fence,
)
from pyspark_dstl.core.checksummed_json import RecordKind

BEFORE_KEY_GROUPS = RecordKind("commit log entry", (MAGIC, FENCE_MAGIC), "entry", 1,
                               CommitLogCorruptError)  # how releases before key groups read


def test_an_entry_in_key_groups_is_version_2_and_older_releases_refuse_it() -> None:
    data = encode_entry(CommitEntry(4, {}, extra={LAYOUT: {"key_groups": 4096}}))
    assert json.loads(data)["format_version"] == 2
    assert decode_entry(data, "commits/4.0").extra[LAYOUT] == {"key_groups": 4096}
    with pytest.raises(CommitLogCorruptError, match="unsupported format version 2"):
        BEFORE_KEY_GROUPS.decode(data, "commits/4.0")


def test_other_entries_and_fences_stay_version_1() -> None:
    entry = encode_entry(CommitEntry(4, {}, extra={"key_columns": ["user"]}))
    fence = encode_fence(Fence(3, "run", (2, "old")))
    assert [json.loads(d)["format_version"] for d in (entry, fence)] == [1, 1]
    assert BEFORE_KEY_GROUPS.decode(entry, "commits/4.0")[1]["batch_id"] == 4
    assert isinstance(decode_record(fence, "commits/5.0"), Fence)
