"""Output files of outputMode "files" on a real local storage: written once, read back exactly,
and every damaged or misreported file refused with an error naming it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.storage.base import md5_hex
from pyspark_dstl.spark.spark_errors import OutputFileError
from pyspark_dstl.spark.stage.output_files import (
    OutputPart,
    delete_batch,
    delete_before,
    part_path,
    read_part,
    write_part,
)

SCHEMA = pa.schema([pa.field("user", pa.string()), pa.field("count", pa.int64())])


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[ChangelogService]:
    with ChangelogService(str(tmp_path / "root")) as opened:
        yield opened


def table(rows: int) -> pa.Table:
    return pa.table({"user": [f"u{i}" for i in range(rows)], "count": list(range(rows))},
                    schema=SCHEMA)


def written(storage: ChangelogService, rows: int = 1000) -> OutputPart:
    return write_part(storage, part_path("stateful", 3, 1, "uid-a"), 1, table(rows))


def read(storage: ChangelogService, part: OutputPart) -> pa.Table:
    return pa.Table.from_batches(list(read_part(storage, part, SCHEMA)), schema=SCHEMA)


def replace(root: Path, part: OutputPart, data: bytes) -> OutputPart:
    """Put `data` in place of the file, as damage on the storage would."""
    assert part.path is not None
    (root / part.path).write_bytes(data)
    return part


def described(part: OutputPart, data: bytes) -> OutputPart:
    """A meta row that describes `data` (size and checksum): what a task that wrote bad
    bytes would report, so only the decoder stands between them and the sink."""
    return OutputPart(part.partition, part.path, part.rows, len(data), md5=md5_hex(data))


def test_a_file_reads_back_as_the_rows_written(storage: ChangelogService) -> None:
    part = written(storage)
    assert (part.path, part.rows) == ("output/stateful/3/1-uid-a.arrows", 1000)
    assert read(storage, part).equals(table(1000))


def test_an_empty_output_writes_no_file(storage: ChangelogService) -> None:
    part = write_part(storage, part_path("stateful", 0, 0, "u"), 0, table(0))
    assert (part.path, part.rows, part.bytes) == (None, 0, 0)
    assert storage.list("output/") == []


def test_a_file_is_written_once(storage: ChangelogService) -> None:
    written(storage)
    with pytest.raises(ChangelogError, match=r"1-uid-a\.arrows"):
        written(storage, rows=5)


def test_a_truncated_file_is_refused_naming_it(storage: ChangelogService,
                                               tmp_path: Path) -> None:
    part = written(storage)
    data = storage.get(str(part.path))
    replace(tmp_path / "root", part, data[: len(data) // 2])
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows.*bytes, its task reported"):
        read(storage, part)


def test_a_file_with_one_byte_changed_is_refused_by_its_checksum(
        storage: ChangelogService, tmp_path: Path) -> None:
    part = written(storage)
    data = bytearray(storage.get(str(part.path)))
    data[len(data) // 2] ^= 0x01
    replace(tmp_path / "root", part, bytes(data))
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows': MD5 [0-9a-f]+ is not the "):
        read(storage, part)


def test_a_truncated_stream_described_as_written_is_refused(storage: ChangelogService,
                                                            tmp_path: Path) -> None:
    part = written(storage)
    data = storage.get(str(part.path))[:-200]
    replace(tmp_path / "root", part, data)
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows' is not a readable Arrow"):
        read(storage, described(part, data))


def test_a_row_count_that_lies_is_refused(storage: ChangelogService) -> None:
    part = written(storage)
    lying = OutputPart(part.partition, part.path, part.rows + 1, part.bytes, md5=part.md5)
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows.*1000 rows, its task reported "
                                              r"1001"):
        read(storage, lying)


def test_a_file_of_another_schema_is_refused(storage: ChangelogService) -> None:
    other = pa.table({"user": ["a"], "count": pa.array([1.5])})
    part = write_part(storage, part_path("stateful", 3, 0, "uid-b"), 0, other)
    with pytest.raises(OutputFileError, match=r"0-uid-b\.arrows.*\(user string, count "
                                              r"double\) are not the output schema's"):
        read(storage, part)


def test_bytes_that_are_not_arrow_are_refused(storage: ChangelogService,
                                              tmp_path: Path) -> None:
    part = written(storage)
    garbage = bytes(range(256)) * (part.bytes // 256 + 1)
    replace(tmp_path / "root", part, garbage[: part.bytes])
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows' is not a readable Arrow"):
        read(storage, described(part, garbage[: part.bytes]))


def test_a_huge_declared_length_is_refused_without_allocating_it(
        storage: ChangelogService, tmp_path: Path) -> None:
    part = written(storage)
    data = bytearray(storage.get(str(part.path)))
    assert data[:4] == b"\xff\xff\xff\xff"  # continuation marker, then the metadata length
    data[4:8] = struct.pack("<i", 0x7FFF_FFF0)
    replace(tmp_path / "root", part, bytes(data))
    with pytest.raises(OutputFileError, match=r"1-uid-a\.arrows' is not a readable Arrow"):
        read(storage, described(part, bytes(data)))


def test_a_batch_s_files_go_and_later_batches_stay(storage: ChangelogService) -> None:
    for batch_id, uid in ((3, "a"), (3, "b"), (4, "c"), (5, "d")):
        write_part(storage, part_path("stateful", batch_id, 0, uid), 0, table(3))
    assert delete_batch(storage, "stateful", 3) == 2
    assert delete_before(storage, "stateful", 5) == 1
    assert [info.path for info in storage.list("output/")] == ["output/stateful/5/0-d.arrows"]
