"""The shared shape of commit entries, fences, epoch files and state schema records."""

from __future__ import annotations

import json

import pytest

from pyspark_dstl.core.checksummed_json import RecordKind


class BadRecord(Exception):
    pass


KIND = RecordKind("test record", ("DSTL-TEST", "DSTL-TEST-OTHER"), "body", 3, BadRecord,
                  max_bytes=1000)


def test_a_record_reads_back_its_magic_and_body() -> None:
    data = KIND.encode({"a": 1, "b": [1, 2]}, "DSTL-TEST-OTHER")
    assert KIND.decode(data, "x/1") == ("DSTL-TEST-OTHER", {"a": 1, "b": [1, 2]})


def test_an_edited_body_fails_its_checksum_by_path() -> None:
    document = json.loads(KIND.encode({"a": 1}))
    document["body"]["a"] = 2
    with pytest.raises(BadRecord, match=r"^test record 'x/1' fails its checksum$"):
        KIND.decode(json.dumps(document).encode(), "x/1")


def test_a_torn_record_is_not_json() -> None:
    data = KIND.encode({"a": 1})
    with pytest.raises(BadRecord, match=r"^test record 'x/1' is not JSON"):
        KIND.decode(data[: len(data) // 2], "x/1")


def test_another_kinds_magic_is_refused() -> None:
    other = RecordKind("other", ("DSTL-ELSE",), "body", 3, BadRecord)
    with pytest.raises(BadRecord, match="lacks magic 'DSTL-TEST'"):
        KIND.decode(other.encode({"a": 1}), "x/1")


def test_a_newer_format_version_is_named_not_misread() -> None:
    newer = RecordKind("test record", ("DSTL-TEST",), "body", 4, BadRecord)
    with pytest.raises(BadRecord, match="unsupported format version 4: this release reads 3"):
        KIND.decode(newer.encode({"a": 1}), "x/1")


def test_a_record_larger_than_its_bound_is_refused_before_parsing() -> None:
    with pytest.raises(BadRecord, match=r"1001 bytes, more than a record may hold \(1000\)"):
        KIND.decode(b" " * 1001, "x/1")


def test_encoding_under_a_foreign_magic_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="DSTL-ELSE"):
        KIND.encode({"a": 1}, "DSTL-ELSE")


def test_a_kind_reads_every_version_from_its_first_and_writes_the_one_asked() -> None:
    spanning = RecordKind("test record", ("DSTL-TEST",), "body", 4, BadRecord, first_version=3)
    older = spanning.encode({"a": 1}, version=3)
    assert json.loads(older)["format_version"] == 3
    assert spanning.decode(older, "x/1") == ("DSTL-TEST", {"a": 1})
    assert spanning.decode(spanning.encode({"a": 1}), "x/1") == ("DSTL-TEST", {"a": 1})
    with pytest.raises(BadRecord, match="unsupported format version 4: this release reads 3"):
        KIND.decode(spanning.encode({"a": 1}), "x/1")
    with pytest.raises(ValueError, match="format version 2 is not one of"):
        spanning.encode({"a": 1}, version=2)


def test_a_body_of_the_wrong_shape_is_malformed_by_path() -> None:
    data = KIND.encode({"a": "one"})
    with pytest.raises(BadRecord, match=r"^test record 'x/1' is malformed: KeyError: 'b'"):
        KIND.decode_as(data, "x/1", lambda magic, body: (magic, int(body["b"])))
    assert KIND.decode_as(KIND.encode({"b": 2}), "x/1", lambda m, body: body["b"]) == 2


def test_a_records_own_refusal_passes_through_unwrapped() -> None:
    def refuse(magic: str, body: dict[str, object]) -> None:
        raise BadRecord("test record 'x/1' describes another record")

    with pytest.raises(BadRecord, match=r"^test record 'x/1' describes another record$"):
        KIND.decode_as(KIND.encode({"a": 1}), "x/1", refuse)
