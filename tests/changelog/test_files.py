"""changelog.files: a whole file's header and one log's change sets, read through a storage."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.changelog import ChangelogService, ChangelogSettings
from pyspark_dstl.changelog.changelog_errors import (
    ChecksumMismatchError,
    FormatError,
    ObjectNotFoundError,
)
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from pyspark_dstl.changelog.files import (
    HEADER_PROBE_BYTES,
    read_file_header,
    read_file_log,
)
from pyspark_dstl.changelog.format import ChangeSet, EncodedFile, LogHeader, encode_file
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
PATH = "state/0/3/7_ab12.changelog"
STORE = "op/0/store-a"
OTHER = "op/0/store-b"


def lineage_metadata(version: int) -> dict[str, object]:
    return {"version": version, "unique_id": f"u{version}",
            "lineage": [[version - 2, "ab"], [version - 1, "cd"]]}


def change_sets(log_id: str, first_sqn: int, count: int) -> list[ChangeSet]:
    return [ChangeSet(log_id, sqn, ((sqn % 4, b"payload-%d" % sqn), (7, b"x" * sqn)))
            for sqn in range(first_sqn, first_sqn + count)]


def two_log_file() -> EncodedFile:
    return encode_file("host:1:abc", [
        (LogHeader(STORE, lineage_metadata(7)), change_sets(STORE, 10, 3)),
        (LogHeader(OTHER, lineage_metadata(9)), change_sets(OTHER, 4, 2)),
    ], compression="zstd")


@pytest.fixture
def storage(storage_url: tuple[str, ChangelogSettings]) -> Iterator[ChangelogService]:
    """A ChangelogService over the conftest's memory://, file:// and s3:// (moto) stores."""
    url, options = storage_url
    with ChangelogService(url, options) as opened:
        yield opened


def test_read_file_header_gives_every_logs_metadata(storage: ChangelogService) -> None:
    storage.put(PATH, two_log_file().data)
    header = read_file_header(storage, PATH)
    assert header.writer_id == "host:1:abc"
    assert [(log.log_id, log.metadata) for log in header.logs] == [
        (STORE, lineage_metadata(7)), (OTHER, lineage_metadata(9))]


def test_read_file_header_reads_a_header_longer_than_the_first_read(
        storage: ChangelogService) -> None:
    metadata = {**lineage_metadata(7), "note": "n" * (2 * HEADER_PROBE_BYTES)}
    storage.put(PATH, encode_file("w", [(LogHeader(STORE, metadata),
                                         change_sets(STORE, 0, 1))]).data)
    assert read_file_header(storage, PATH).logs[0].metadata == metadata


def test_read_file_log_gives_only_the_asked_logs_change_sets_in_sqn_order(
        storage: ChangelogService) -> None:
    storage.put(PATH, two_log_file().data)
    log = read_file_log(storage, PATH, OTHER)
    assert [change_set for _, change_set in log.located] == change_sets(OTHER, 4, 2)


def test_read_file_log_locates_each_change_set_at_its_frame(storage: ChangelogService) -> None:
    encoded = two_log_file()
    storage.put(PATH, encoded.data)
    log = read_file_log(storage, PATH, STORE)
    frames = [frame for frame in encoded.frames if frame.log_id == STORE]
    assert [(s.from_sqn, s.to_sqn, s.path, s.offset, s.length, s.key_groups)
            for s, _ in log.located] == [
        (f.sqn, f.sqn + 1, PATH, f.offset, f.length, f.key_groups) for f in frames]


def test_read_file_log_reports_the_file_size_and_header(storage: ChangelogService) -> None:
    encoded = two_log_file()
    storage.put(PATH, encoded.data)
    log = read_file_log(storage, PATH, STORE)
    assert (log.path, log.file_size, log.header) == (PATH, len(encoded.data), encoded.header)


def test_read_file_log_of_a_log_the_file_does_not_hold_is_empty(
        storage: ChangelogService) -> None:
    storage.put(PATH, two_log_file().data)
    assert read_file_log(storage, PATH, "op/0/store-z").located == ()


def test_segments_of_a_writers_file_rebuild_the_handle_it_persisted(
        storage: ChangelogService) -> None:
    writer = storage.create_writer(STORE, directory="state/0/3")
    writer.set_header(lineage_metadata(7))
    for sqn in range(5):
        writer.append(sqn % 3, b"change %d" % sqn)
        writer.next_sqn()
    handle = writer.persist(0).result()
    (path,) = handle.paths
    segments = [segment for segment, _ in read_file_log(storage, path, STORE).located]
    assert ChangelogHandle.of(STORE, 0, 5, segments) == handle


def test_read_file_log_rejects_a_damaged_frame_naming_the_file_and_offset(
        storage: ChangelogService) -> None:
    encoded = two_log_file()
    frame = encoded.frames[4]  # in the other log: the whole file is checked
    damaged = bytearray(encoded.data)
    damaged[frame.offset + frame.length - 1] ^= 0x40
    storage.put(PATH, bytes(damaged))
    with pytest.raises(ChecksumMismatchError) as caught:
        read_file_log(storage, PATH, STORE)
    assert (caught.value.path, caught.value.offset) == (PATH, frame.offset)
    assert f"file {PATH!r} at offset {frame.offset}" in str(caught.value)


def test_read_file_header_rejects_a_damaged_header_naming_the_file_and_offset(
        storage: ChangelogService) -> None:
    encoded = two_log_file()
    first_frame = encoded.frames[0].offset
    damaged = bytearray(encoded.data)
    damaged[first_frame - 6] ^= 0x40  # the header's last byte, before its CRC
    storage.put(PATH, bytes(damaged))
    with pytest.raises(FormatError) as caught:
        read_file_header(storage, PATH)
    assert (caught.value.path, caught.value.offset) == (PATH, first_frame - 4)
    assert f"file {PATH!r}" in str(caught.value)


def test_a_missing_file_raises_object_not_found_naming_it(storage: ChangelogService) -> None:
    with pytest.raises(ObjectNotFoundError) as caught:
        read_file_log(storage, PATH, STORE)
    assert caught.value.path == PATH


def imported_modules(source: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_only_the_changelog_imports_its_file_layout() -> None:
    users = {str(source.relative_to(ROOT))
             for room in ("backend", "spark", "materializer")
             for source in (ROOT / room).rglob("*.py")
             if "pyspark_dstl.changelog.format" in imported_modules(source)}
    assert users == set()
