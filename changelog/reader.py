"""Reads one log's change sets back from the file segments a ChangelogHandle names.

Segments are fetched with ranged reads, several at once (bounded by read_parallelism), and are
yielded strictly in SQN order. Every segment is checked against the handle: right log, and
exactly the SQNs it claims, so a wrong or stale handle fails loudly instead of replaying
someone else's changes. Each file's preamble (magic, format version) is verified once per
handle read before any of its frames is decoded, so a file of another kind or of a future
version is rejected rather than replayed as version 1.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from itertools import islice

from pyspark_dstl.changelog.changelog_errors import FormatError, TruncatedFileError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import (
    PREAMBLE_SIZE,
    ChangeSet,
    decode_header,
    decode_preamble,
    iter_frames,
)
from pyspark_dstl.changelog.segment_cache import SegmentCache
from pyspark_dstl.changelog.storage.base import Storage

log = logging.getLogger(__name__)

Fetch = Callable[[str, int, int], Awaitable[bytes]]
"""fetch(path, start, end) -> bytes [start, end) of the object at `path`."""

DECODE_IN_THREAD_BYTES = 1024 * 1024
"""Segments at least this large are decoded off the event loop so uploads keep moving."""

PREAMBLE_WINDOW_BYTES = 64 * 1024
"""A file's first read starting this close to byte 0 is extended to 0: the preamble and header
are then checked from the same request. Farther reads fetch the preamble on its own."""


class ChangelogReader:
    def __init__(self, storage: Storage, settings: ChangelogSettings,
                 cache: SegmentCache | None = None, fetch: Fetch | None = None) -> None:
        self._storage = storage
        self._settings = settings
        self._cache = cache if cache is not None else SegmentCache.from_settings(settings)
        self._fetch: Fetch = fetch if fetch is not None else storage.get

    async def aread(self, handle: ChangelogHandle) -> list[ChangeSet]:
        """The handle's change sets, ordered by SQN, each exactly once."""
        return [change_set async for change_set in self.aiter(handle)]

    async def aiter(self, handle: ChangelogHandle) -> AsyncIterator[ChangeSet]:
        """Like aread, streaming: at most read_parallelism reads are fetched or held at once."""
        reads = _first_of_each_file(plan_reads(handle.segments))
        pending: deque[tuple[list[Segment], asyncio.Task[list[ChangeSet]]]] = deque()

        def start(read: list[Segment], check: bool) -> None:
            pending.append((read, asyncio.create_task(self._read(handle.log_id, read, check))))

        last_sqn = handle.from_sqn - 1
        try:
            for read, check in islice(reads, self._settings.read_parallelism):
                start(read, check)
            while pending:
                read, task = pending.popleft()
                change_sets = await task
                following = next(reads, None)
                if following is not None:
                    start(*following)
                for change_set in change_sets:
                    if not last_sqn < change_set.sqn < handle.to_sqn:
                        raise FormatError(
                            f"SQN {change_set.sqn} of log {handle.log_id!r} breaks the order "
                            f"of handle [{handle.from_sqn}, {handle.to_sqn}) after SQN "
                            f"{last_sqn}", self._storage.url_of(read[0].path))
                    last_sqn = change_set.sqn
                    yield change_set
        finally:
            for _, task in pending:
                task.cancel()
            await asyncio.gather(*(task for _, task in pending), return_exceptions=True)

    async def _read(self, log_id: str, read: list[Segment], check: bool) -> list[ChangeSet]:
        """The read's change sets; with `check`, its file's preamble is verified first.

        Reads are awaited in plan order, so the later reads of a file, which skip the check,
        are only yielded after the read that made it succeeded.
        """
        path = read[0].path
        url = self._storage.url_of(path)
        start = read[0].offset
        if self._cache is not None:
            pieces = await self._cached_pieces(url, read)
            if pieces is not None:
                if check:
                    await self._check_preamble(path, url, start)
                    check = False
                cached = await self._decode_cached(url, log_id, read, pieces)
                if cached is not None:
                    return cached
        end = read[-1].offset + read[-1].length
        base, data = await self._fetch_read(path, url, start, end, check)
        if len(data) != end - base:
            raise TruncatedFileError(f"ranged read of [{base}, {end}) returned {len(data)} "
                                     f"bytes", url, base + len(data))
        view = memoryview(data)
        change_sets: list[ChangeSet] = []
        for segment in read:
            piece = view[segment.offset - base:segment.offset - base + segment.length]
            change_sets += await _decode(piece, url, segment, log_id)
            await self._cache_put(url, segment.offset, piece)
        return change_sets

    async def _fetch_read(self, path: str, url: str, start: int, end: int,
                          check: bool) -> tuple[int, bytes]:
        """(offset of the bytes, bytes) covering [start, end), the preamble checked if asked."""
        if not check:
            return start, await self._fetch(path, start, end)
        if start > PREAMBLE_WINDOW_BYTES:
            _, data = await asyncio.gather(self._check_preamble(path, url, start),
                                           self._fetch(path, start, end))
            return start, data
        data = await self._fetch(path, 0, end)
        _, first_frame = decode_header(data, url)
        _check_start(first_frame, start, url)
        await self._cache_put(url, 0, memoryview(data)[:PREAMBLE_SIZE])
        return 0, data

    async def _check_preamble(self, path: str, url: str, start: int) -> None:
        """Verify the file's preamble from the cache when it holds it, else a small read."""
        if self._cache is not None:
            cached = await asyncio.to_thread(self._cache.get, url, 0, PREAMBLE_SIZE)
            if cached is not None:
                try:
                    first_frame = decode_preamble(cached, url)
                except FormatError as exc:
                    log.warning("dropping corrupt cached preamble of %s: %s", url, exc)
                    await asyncio.to_thread(self._cache.drop, url, 0, PREAMBLE_SIZE)
                else:
                    _check_start(first_frame, start, url)
                    return
        preamble = await self._fetch(path, 0, PREAMBLE_SIZE)
        _check_start(decode_preamble(preamble, url), start, url)
        await self._cache_put(url, 0, preamble)

    async def _cached_pieces(self, url: str, read: list[Segment]) -> list[bytes] | None:
        """The read's segments from the cache, or None when any of them must be fetched."""
        assert self._cache is not None
        pieces: list[bytes] = []
        for segment in read:
            data = await asyncio.to_thread(self._cache.get, url, segment.offset, segment.length)
            if data is None:
                return None
            pieces.append(data)
        return pieces

    async def _decode_cached(self, url: str, log_id: str, read: list[Segment],
                             pieces: list[bytes]) -> list[ChangeSet] | None:
        """Cached segments decoded like fresh ones; None (entry dropped) when one fails."""
        assert self._cache is not None
        change_sets: list[ChangeSet] = []
        for segment, data in zip(read, pieces, strict=True):
            try:
                change_sets += await _decode(memoryview(data), url, segment, log_id)
            except FormatError as exc:
                log.warning("dropping corrupt cache entry of %s: %s", url, exc)
                await asyncio.to_thread(self._cache.drop, url, segment.offset, segment.length)
                return None
        return change_sets

    async def _cache_put(self, url: str, offset: int, data: bytes | memoryview) -> None:
        if self._cache is not None:
            await asyncio.to_thread(self._cache.put, url, offset, data)


def _first_of_each_file(reads: list[list[Segment]]) -> Iterator[tuple[list[Segment], bool]]:
    """Each read, and whether it is the first of its file (the one that checks the preamble)."""
    seen: set[str] = set()
    for read in reads:
        path = read[0].path
        yield read, path not in seen
        seen.add(path)


def _check_start(first_frame: int, start: int, url: str) -> None:
    if start < first_frame:
        raise FormatError(f"segment starts at offset {start}, inside the file header that "
                          f"ends at {first_frame}", url, start)


def plan_reads(segments: tuple[Segment, ...]) -> list[list[Segment]]:
    """Group consecutive segments that continue each other's bytes in one file into one read."""
    reads: list[list[Segment]] = []
    for segment in segments:
        previous = reads[-1][-1] if reads else None
        if (previous is not None and previous.path == segment.path
                and previous.offset + previous.length == segment.offset):
            reads[-1].append(segment)
        else:
            reads.append([segment])
    return reads


async def _decode(data: memoryview, url: str, segment: Segment,
                  log_id: str) -> list[ChangeSet]:
    if len(data) >= DECODE_IN_THREAD_BYTES:
        return await asyncio.to_thread(decode_segment, data, url, segment, log_id)
    return decode_segment(data, url, segment, log_id)


def decode_segment(data: memoryview | bytes, url: str, segment: Segment,
                   log_id: str) -> list[ChangeSet]:
    """Decode a segment's bytes; they must hold exactly log_id's SQNs [from_sqn, to_sqn)."""
    expected = segment.from_sqn
    change_sets: list[ChangeSet] = []
    for offset, change_set in iter_frames(data, url, segment.offset):
        where = f"segment [{segment.from_sqn}, {segment.to_sqn}) of log {log_id!r}"
        if change_set.log_id != log_id:
            raise FormatError(f"{where}: frame holds log {change_set.log_id!r}", url, offset)
        if change_set.sqn != expected or expected >= segment.to_sqn:
            raise FormatError(f"{where}: frame holds SQN {change_set.sqn}, expected "
                              f"{expected if expected < segment.to_sqn else 'none'}",
                              url, offset)
        expected += 1
        change_sets.append(change_set)
    if expected != segment.to_sqn:
        raise FormatError(f"segment [{segment.from_sqn}, {segment.to_sqn}) of log {log_id!r} "
                          f"ends at SQN {expected}", url, segment.offset + segment.length)
    return change_sets
