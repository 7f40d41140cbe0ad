"""ChangelogReader and SegmentCache against a real in-memory object store and real files."""

from __future__ import annotations

import asyncio
import os
import random
import re
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pyspark_dstl.changelog.changelog_errors import (
    BadMagicError,
    ChecksumMismatchError,
    FormatError,
    ObjectNotFoundError,
    TruncatedFileError,
    UnsupportedVersionError,
)
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import (
    FORMAT_VERSION,
    MAGIC,
    PREAMBLE_SIZE,
    ChangeSet,
    EncodedFile,
    LogHeader,
    encode_file,
)
from pyspark_dstl.changelog.reader import (
    DECODE_IN_THREAD_BYTES,
    PREAMBLE_WINDOW_BYTES,
    ChangelogReader,
)
from pyspark_dstl.changelog.segment_cache import SegmentCache
from pyspark_dstl.changelog.storage import Storage, open_storage
from pyspark_dstl.changelog.storage.memory import MemoryStorage

LOGS = ("op/0/a", "op/0/b", "op/0/c")
SETS_PER_FILE = 3


@pytest.fixture
async def store() -> AsyncIterator[MemoryStorage]:
    name = f"reader-{uuid.uuid4().hex}"
    yield MemoryStorage(name)
    MemoryStorage.drop(name)


@pytest.fixture
async def any_store(storage_url: tuple[str, ChangelogSettings]) -> AsyncIterator[Storage]:
    """The conftest's memory://, file:// and s3:// (moto) stores."""
    url, store_options = storage_url
    opened = open_storage(url, store_options)
    yield opened
    await opened.close()


class CountingFetch:
    """Ranged reads through the real store, remembering each (path, start, end)."""

    def __init__(self, store: MemoryStorage) -> None:
        self.store = store
        self.calls: list[tuple[str, int, int]] = []

    async def __call__(self, path: str, start: int, end: int) -> bytes:
        self.calls.append((path, start, end))
        return await self.store.get(path, start, end)


class ConcurrencyProbe(CountingFetch):
    """Holds each read until `parties` reads are in flight together; records the peak."""

    def __init__(self, store: MemoryStorage, parties: int) -> None:
        super().__init__(store)
        self.barrier = asyncio.Barrier(parties)
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, path: str, start: int, end: int) -> bytes:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            # Deadlock guard only: a reader that reads one at a time never fills the barrier.
            async with asyncio.timeout(10):
                await self.barrier.wait()
            return await super().__call__(path, start, end)
        finally:
            self.in_flight -= 1


def change_sets_of(log_id: str, first_sqn: int, rng: random.Random) -> list[ChangeSet]:
    return [ChangeSet(log_id, sqn, tuple((rng.randrange(64), rng.randbytes(rng.randrange(80)))
                                         for _ in range(rng.randrange(1, 5))))
            for sqn in range(first_sqn, first_sqn + SETS_PER_FILE)]


async def write_files(store: Storage, count: int, seed: int = 0,
                      compression: str = "none") -> dict[str, EncodedFile]:
    """`count` files, each holding SETS_PER_FILE change sets of every log in LOGS."""
    rng = random.Random(seed)
    files = {}
    for number in range(count):
        logs = [(LogHeader(log_id, {"file": number}),
                 change_sets_of(log_id, number * SETS_PER_FILE, rng)) for log_id in LOGS]
        encoded = encode_file("test-writer", logs, compression=compression)
        path = f"state/{number:03d}.changelog"
        await store.put_if_absent(path, encoded.data)
        files[path] = encoded
    return files


def handle_of(log_id: str, files: dict[str, EncodedFile], from_sqn: int = 0) -> ChangelogHandle:
    """The handle a writer builds: one segment per frame, merged where they continue."""
    segments = [Segment(f.sqn, f.sqn + 1, path, f.offset, f.length, f.key_groups)
                for path, encoded in files.items() for f in encoded.frames
                if f.log_id == log_id and f.sqn >= from_sqn]
    to_sqn = max(segment.to_sqn for segment in segments)
    return ChangelogHandle.of(log_id, from_sqn, to_sqn, segments)


def expected_of(log_id: str, files: dict[str, EncodedFile], store: Storage,
                from_sqn: int = 0) -> list[ChangeSet]:
    from pyspark_dstl.changelog.format import read_file

    found = [cs for path, encoded in files.items()
             for cs in read_file(encoded.data, store.url_of(path))[1]]
    return [cs for cs in found if cs.log_id == log_id and cs.sqn >= from_sqn]


async def write_far_file(store: Storage, path: str, magic: bytes = MAGIC,
                         version: int = FORMAT_VERSION) -> EncodedFile:
    """A file whose log 'far' starts past PREAMBLE_WINDOW_BYTES, behind a large log 'near'."""
    rng = random.Random(7)
    near = [ChangeSet("near", 0, ((0, rng.randbytes(PREAMBLE_WINDOW_BYTES)),))]
    far = [ChangeSet("far", sqn, ((1, b"v%d" % sqn),)) for sqn in range(SETS_PER_FILE)]
    encoded = encode_file("w", [(LogHeader("near", {}), near), (LogHeader("far", {}), far)])
    await store.put_if_absent(path, with_preamble(encoded.data, magic, version))
    return encoded


def with_preamble(data: bytes, magic: bytes, version: int) -> bytes:
    """`data` with its magic and version fields replaced (the rest, CRCs included, intact)."""
    return magic + struct.pack(">H", version) + data[len(MAGIC) + 2:]


def options(**changes: object) -> ChangelogSettings:
    return ChangelogSettings().with_changes(**changes)


# --- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "zstd"])
async def test_reader_returns_only_the_handles_log_in_sqn_order(store: MemoryStorage,
                                                                compression: str) -> None:
    files = await write_files(store, count=4, compression=compression)
    result = await ChangelogReader(store, options()).aread(handle_of("op/0/b", files))
    assert result == expected_of("op/0/b", files, store)
    assert [cs.sqn for cs in result] == list(range(4 * SETS_PER_FILE))


async def test_reader_returns_only_the_sqns_of_a_sliced_handle(store: MemoryStorage) -> None:
    files = await write_files(store, count=4)
    handle = handle_of("op/0/c", files).slice(2 * SETS_PER_FILE)
    result = await ChangelogReader(store, options()).aread(handle)
    assert result == expected_of("op/0/c", files, store, from_sqn=2 * SETS_PER_FILE)


async def test_reader_reads_each_file_once_from_its_start_to_the_segments_end(
        store: MemoryStorage) -> None:
    files = await write_files(store, count=3)
    handle = handle_of("op/0/a", files)
    fetch = CountingFetch(store)
    await ChangelogReader(store, options(), fetch=fetch).aread(handle)
    assert sorted(fetch.calls) == sorted(
        (s.path, 0, s.offset + s.length) for s in handle.segments)
    assert all(end < len(files[path].data) for path, _, end in fetch.calls)


async def test_reader_fetches_the_preamble_alone_for_a_segment_far_from_the_file_start(
        store: MemoryStorage) -> None:
    encoded = await write_far_file(store, "far.changelog")
    segment = handle_of("far", {"far.changelog": encoded}).segments[0]
    fetch = CountingFetch(store)
    result = await ChangelogReader(store, options(), fetch=fetch).aread(
        handle_of("far", {"far.changelog": encoded}))
    assert [cs.log_id for cs in result] == ["far"] * SETS_PER_FILE
    assert segment.offset > PREAMBLE_WINDOW_BYTES
    assert sorted(fetch.calls) == [("far.changelog", 0, PREAMBLE_SIZE),
                                   ("far.changelog", segment.offset,
                                    segment.offset + segment.length)]


async def test_reader_fetches_segments_in_parallel_up_to_read_parallelism(
        store: MemoryStorage) -> None:
    files = await write_files(store, count=6)
    probe = ConcurrencyProbe(store, parties=3)
    reader = ChangelogReader(store, options(read_parallelism=3), fetch=probe)
    result = await reader.aread(handle_of("op/0/a", files))
    assert result == expected_of("op/0/a", files, store)
    assert probe.peak == 3
    assert len(probe.calls) == 6


async def test_reader_of_an_empty_handle_reads_nothing(store: MemoryStorage) -> None:
    fetch = CountingFetch(store)
    reader = ChangelogReader(store, options(), fetch=fetch)
    assert await reader.aread(ChangelogHandle.empty("op/0/a", 5)) == []
    assert fetch.calls == []


async def test_reader_decodes_a_large_change_set(store: MemoryStorage) -> None:
    payload = os.urandom(DECODE_IN_THREAD_BYTES + 1)
    change_sets = [ChangeSet("big", 0, ((1, payload),)), ChangeSet("big", 1, ((1, b"x"),))]
    encoded = encode_file("w", [(LogHeader("big", {}), change_sets)])
    await store.put_if_absent("big.changelog", encoded.data)
    result = await ChangelogReader(store, options()).aread(
        handle_of("big", {"big.changelog": encoded}))
    assert result == change_sets


async def test_aiter_yields_what_aread_returns(store: MemoryStorage) -> None:
    files = await write_files(store, count=3)
    reader = ChangelogReader(store, options(read_parallelism=2))
    handle = handle_of("op/0/b", files)
    assert [cs async for cs in reader.aiter(handle)] == await reader.aread(handle)


async def test_aiter_closed_early_cancels_reads_in_flight(store: MemoryStorage) -> None:
    files = await write_files(store, count=4)
    handle = handle_of("op/0/a", files)
    first_path = handle.segments[0].path
    cancelled: list[str] = []
    never = asyncio.Event()

    async def fetch(path: str, start: int, end: int) -> bytes:
        if path != first_path:
            try:
                await never.wait()
            except asyncio.CancelledError:
                cancelled.append(path)
                raise
        return await store.get(path, start, end)

    stream = ChangelogReader(store, options(read_parallelism=4), fetch=fetch).aiter(handle)
    assert (await anext(stream)).sqn == 0
    await stream.aclose()  # type: ignore[attr-defined]
    assert sorted(cancelled) == sorted(s.path for s in handle.segments[1:])


# --- checks ------------------------------------------------------------------------------------


async def test_reader_rejects_a_segment_of_another_log(store: MemoryStorage) -> None:
    files = await write_files(store, count=1)
    foreign = handle_of("op/0/b", files).segments[0]
    handle = ChangelogHandle.of("op/0/a", 0, SETS_PER_FILE, [foreign])
    with pytest.raises(FormatError, match=r"frame holds log 'op/0/b'.*state/000\.changelog"):
        await ChangelogReader(store, options()).aread(handle)


async def test_reader_rejects_a_segment_missing_an_sqn(store: MemoryStorage) -> None:
    files = await write_files(store, count=1)
    whole = handle_of("op/0/a", files).segments[0]
    last_frame = [f for f in files[whole.path].frames if f.log_id == "op/0/a"][-1]
    short = Segment(whole.from_sqn, whole.to_sqn, whole.path, whole.offset,
                    whole.length - last_frame.length)
    with pytest.raises(FormatError, match=f"ends at SQN {last_frame.sqn}"):
        await ChangelogReader(store, options()).aread(
            ChangelogHandle.of("op/0/a", 0, whole.to_sqn, [short]))


async def test_reader_rejects_a_segment_with_other_sqns_than_claimed(
        store: MemoryStorage) -> None:
    files = await write_files(store, count=1)
    whole = handle_of("op/0/a", files).segments[0]
    shifted = Segment(whole.from_sqn + 1, whole.to_sqn + 1, whole.path, whole.offset,
                      whole.length)
    with pytest.raises(FormatError, match=f"holds SQN {whole.from_sqn}, expected "
                                          f"{whole.from_sqn + 1}"):
        await ChangelogReader(store, options()).aread(
            ChangelogHandle.of("op/0/a", 1, whole.to_sqn + 1, [shifted]))


async def test_reader_reports_a_segment_past_the_end_of_the_file(store: MemoryStorage) -> None:
    files = await write_files(store, count=1)
    whole = handle_of("op/0/c", files).segments[0]
    size = len(files[whole.path].data)
    beyond = Segment(whole.from_sqn, whole.to_sqn, whole.path, whole.offset, size)
    with pytest.raises(TruncatedFileError, match=f"at offset {size}"):
        await ChangelogReader(store, options()).aread(
            ChangelogHandle.of("op/0/c", 0, whole.to_sqn, [beyond]))


async def test_reader_detects_a_damaged_stored_file(store: MemoryStorage) -> None:
    change_sets = [ChangeSet("log", sqn, ((0, b"value-%d" % sqn),)) for sqn in range(3)]
    encoded = encode_file("w", [(LogHeader("log", {}), change_sets)])
    damaged = bytearray(encoded.data)
    damaged[encoded.frames[1].offset + 12] ^= 0x01
    await store.put_if_absent("bad.changelog", bytes(damaged))
    with pytest.raises(ChecksumMismatchError,
                       match=f"bad.changelog' at offset {encoded.frames[1].offset}"):
        await ChangelogReader(store, options()).aread(handle_of("log", {"bad.changelog":
                                                                        encoded}))


PREAMBLE_DAMAGES = [
    pytest.param(b"NOTDSTL!", FORMAT_VERSION, BadMagicError, "not a changelog file", 0,
                 id="wrong_magic"),
    pytest.param(MAGIC, FORMAT_VERSION + 1, UnsupportedVersionError,
                 f"version {FORMAT_VERSION + 1} is not supported", len(MAGIC),
                 id="future_version"),
]
PREAMBLE_ARGS = ("magic", "version", "error", "message", "offset")


async def write_one(store: Storage, path: str, magic: bytes = MAGIC,
                    version: int = FORMAT_VERSION) -> dict[str, EncodedFile]:
    """One file of log 'log' (segments right after the header), preamble fields as given."""
    change_sets = [ChangeSet("log", sqn, ((0, b"value-%d" % sqn),)) for sqn in range(3)]
    encoded = encode_file("w", [(LogHeader("log", {}), change_sets)])
    await store.put_if_absent(path, with_preamble(encoded.data, magic, version))
    return {path: encoded}


@pytest.mark.parametrize(PREAMBLE_ARGS, PREAMBLE_DAMAGES)
async def test_reader_rejects_a_bad_preamble_of_a_file_read_from_near_its_start(
        any_store: Storage, magic: bytes, version: int, error: type[FormatError],
        message: str, offset: int) -> None:
    files = await write_one(any_store, "state/bad.changelog", magic, version)
    url = any_store.url_of("state/bad.changelog")
    with pytest.raises(error, match=f"{message}.*{re.escape(url)}' at offset {offset}\\)"):
        await ChangelogReader(any_store, options()).aread(handle_of("log", files))


@pytest.mark.parametrize(PREAMBLE_ARGS, PREAMBLE_DAMAGES)
async def test_reader_rejects_a_bad_preamble_of_a_file_read_far_from_its_start(
        any_store: Storage, magic: bytes, version: int, error: type[FormatError],
        message: str, offset: int) -> None:
    encoded = await write_far_file(any_store, "state/far.changelog", magic, version)
    url = any_store.url_of("state/far.changelog")
    with pytest.raises(error, match=f"{message}.*{re.escape(url)}' at offset {offset}\\)"):
        await ChangelogReader(any_store, options()).aread(
            handle_of("far", {"state/far.changelog": encoded}))


async def test_reader_checks_the_preamble_of_a_file_whose_segments_are_cached(
        store: MemoryStorage, tmp_path: Path) -> None:
    files = await write_one(store, "bad.changelog", magic=b"NOTDSTL!")
    handle = handle_of("log", files)
    cache = SegmentCache(str(tmp_path / "cache"), 1024 * 1024)
    data = await store.get("bad.changelog")
    for segment in handle.segments:
        cache.put(store.url_of(segment.path), segment.offset,
                  data[segment.offset:segment.offset + segment.length])
    fetch = CountingFetch(store)
    with pytest.raises(BadMagicError, match=r"bad\.changelog' at offset 0"):
        await ChangelogReader(store, options(), cache=cache, fetch=fetch).aread(handle)
    assert fetch.calls == [("bad.changelog", 0, PREAMBLE_SIZE)]


async def test_reader_rejects_a_segment_that_starts_inside_the_file_header(
        store: MemoryStorage) -> None:
    files = await write_one(store, "f.changelog")
    whole = handle_of("log", files).segments[0]
    early = Segment(whole.from_sqn, whole.to_sqn, whole.path, PREAMBLE_SIZE,
                    whole.offset + whole.length - PREAMBLE_SIZE)
    with pytest.raises(FormatError, match=f"inside the file header that ends at "
                                          f"{whole.offset}.*at offset {PREAMBLE_SIZE}"):
        await ChangelogReader(store, options()).aread(
            ChangelogHandle.of("log", 0, whole.to_sqn, [early]))


async def test_reader_of_a_missing_file_raises_object_not_found(store: MemoryStorage) -> None:
    files = await write_files(store, count=1)
    handle = handle_of("op/0/a", files)
    await store.delete(handle.segments[0].path)
    with pytest.raises(ObjectNotFoundError):
        await ChangelogReader(store, options()).aread(handle)


# --- cache -------------------------------------------------------------------------------------


async def test_cache_serves_a_second_read_without_fetching(store: MemoryStorage,
                                                           tmp_path: Path) -> None:
    files = await write_files(store, count=3)
    handle = handle_of("op/0/b", files)
    cache = SegmentCache(str(tmp_path / "cache"), 1024 * 1024)
    fetch = CountingFetch(store)
    first = await ChangelogReader(store, options(), cache=cache, fetch=fetch).aread(handle)
    fetched = len(fetch.calls)
    second = await ChangelogReader(store, options(), cache=cache, fetch=fetch).aread(handle)
    assert second == first == expected_of("op/0/b", files, store)
    assert fetched == len(handle.segments)
    assert len(fetch.calls) == fetched


async def test_cache_refetches_a_corrupted_entry(store: MemoryStorage, tmp_path: Path) -> None:
    files = await write_files(store, count=2)
    handle = handle_of("op/0/a", files)
    cache_dir = tmp_path / "cache"
    cache = SegmentCache(str(cache_dir), 1024 * 1024)
    fetch = CountingFetch(store)
    reader = ChangelogReader(store, options(), cache=cache, fetch=fetch)
    await reader.aread(handle)
    entries = sorted(p for p in cache_dir.iterdir() if p.stat().st_size != PREAMBLE_SIZE)
    damaged = bytearray(entries[0].read_bytes())
    damaged[-1] ^= 0x01
    entries[0].write_bytes(bytes(damaged))
    assert await reader.aread(handle) == expected_of("op/0/a", files, store)
    assert len(fetch.calls) == len(handle.segments) + 1
    assert await reader.aread(handle) == expected_of("op/0/a", files, store)
    assert len(fetch.calls) == len(handle.segments) + 1


async def test_cache_refetches_a_corrupted_preamble_entry(store: MemoryStorage,
                                                         tmp_path: Path) -> None:
    files = await write_files(store, count=2)
    handle = handle_of("op/0/a", files)
    cache_dir = tmp_path / "cache"
    fetch = CountingFetch(store)
    reader = ChangelogReader(store, options(), cache=SegmentCache(str(cache_dir), 1 << 20),
                             fetch=fetch)
    await reader.aread(handle)
    preambles = sorted(p for p in cache_dir.iterdir() if p.stat().st_size == PREAMBLE_SIZE)
    assert len(preambles) == len(files)
    preambles[0].write_bytes(b"NOTDSTL!" + preambles[0].read_bytes()[len(MAGIC):])
    assert await reader.aread(handle) == expected_of("op/0/a", files, store)
    assert len(fetch.calls) == len(files) + 1
    assert fetch.calls[-1][1:] == (0, PREAMBLE_SIZE)


async def test_reader_uses_the_cache_the_options_name(store: MemoryStorage,
                                                      tmp_path: Path) -> None:
    files = await write_files(store, count=2)
    handle = handle_of("op/0/c", files)
    cached = options(cache_dir=str(tmp_path / "cache"))
    fetch = CountingFetch(store)
    await ChangelogReader(store, cached, fetch=fetch).aread(handle)
    await ChangelogReader(store, cached, fetch=fetch).aread(handle)
    assert len(fetch.calls) == len(handle.segments)


async def test_cache_keeps_stores_with_the_same_paths_apart(tmp_path: Path) -> None:
    names = [f"reader-{uuid.uuid4().hex}" for _ in range(2)]
    stores = [MemoryStorage(name) for name in names]
    cache = SegmentCache(str(tmp_path / "cache"), 1024 * 1024)
    try:
        results = []
        for seed, each in enumerate(stores):
            files = await write_files(each, count=1, seed=seed)
            reader = ChangelogReader(each, options(), cache=cache)
            results.append((await reader.aread(handle_of("op/0/a", files)),
                            expected_of("op/0/a", files, each)))
        assert [got for got, _ in results] == [want for _, want in results]
        assert results[0][0] != results[1][0]
    finally:
        for name in names:
            MemoryStorage.drop(name)


def test_cache_evicts_the_least_recently_used_entry(tmp_path: Path) -> None:
    cache = SegmentCache(str(tmp_path), max_bytes=250)
    for name in ("a", "b"):
        cache.put(f"memory://x/{name}", 0, name.encode() * 100)
    assert cache.get("memory://x/a", 0, 100) == b"a" * 100
    cache.put("memory://x/c", 0, b"c" * 100)
    assert cache.get("memory://x/b", 0, 100) is None
    assert cache.get("memory://x/a", 0, 100) == b"a" * 100
    assert cache.get("memory://x/c", 0, 100) == b"c" * 100
    assert cache.size_bytes == 200
    assert len(list(tmp_path.iterdir())) == 2


def test_cache_finds_its_entries_after_a_restart(tmp_path: Path) -> None:
    SegmentCache(str(tmp_path), 1000).put("memory://x/f", 10, b"segment")
    reopened = SegmentCache(str(tmp_path), 1000)
    assert reopened.get("memory://x/f", 10, 7) == b"segment"
    assert reopened.size_bytes == 7


def test_cache_does_not_keep_a_range_larger_than_itself(tmp_path: Path) -> None:
    cache = SegmentCache(str(tmp_path), max_bytes=10)
    cache.put("memory://x/f", 0, b"x" * 11)
    assert cache.get("memory://x/f", 0, 11) is None
    assert list(tmp_path.iterdir()) == []


def test_cache_drops_an_entry_of_the_wrong_size(tmp_path: Path) -> None:
    cache = SegmentCache(str(tmp_path), 1000)
    cache.put("memory://x/f", 0, b"0123456789")
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"01234")
    assert cache.get("memory://x/f", 0, 10) is None
    assert list(tmp_path.iterdir()) == []


def test_cache_is_off_without_a_cache_dir(tmp_path: Path) -> None:
    assert SegmentCache.from_settings(options()) is None
    cache = SegmentCache.from_settings(options(cache_dir=str(tmp_path), cache_max_bytes=4096))
    assert cache is not None
    assert (cache.directory, cache.max_bytes) == (str(tmp_path), 4096)
