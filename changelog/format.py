"""Changelog file format v1: encode change sets of several logs into one file, decode them back.

The byte layout is documented in docs/changelog-format.md. Frames carry their log id and SQN so a
ranged read of one segment (no header) can still be checked against what was asked for.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zlib import crc32

import msgpack

from pyspark_dstl.changelog.changelog_errors import (
    BadMagicError,
    ChecksumMismatchError,
    FormatError,
    TruncatedFileError,
    UnsupportedVersionError,
)
from pyspark_dstl.changelog.compression import FrameCompressor, codec_name, decompress
from pyspark_dstl.core.errors import excerpt

MAGIC = b"DSTLCLOG"
FOOTER_MAGIC = b"DSTLTAIL"
FORMAT_VERSION = 1
MAX_HEADER_LENGTH = 64 * 1024 * 1024
MAX_FRAME_LENGTH = 2**31 - 1
MAX_KEY_GROUP = 2**32 - 1
MAX_SQN = 2**63 - 1
ENTRY_OVERHEAD = 8
"""Bytes counted per entry on top of its payload (msgpack framing of key group and payload)."""

_PREAMBLE = struct.Struct(">8sHHI")  # magic, version, codec, header length
_U32 = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">II")  # body length, CRC32 of body
_FOOTER = struct.Struct(">8sII")  # footer magic, frame count, CRC32 of the 12 bytes before
_AS_FRAME_LENGTH = int.from_bytes(FOOTER_MAGIC[:4], "big")  # footer magic read as a length
PREAMBLE_SIZE = _PREAMBLE.size
FRAME_HEAD_SIZE = _FRAME_HEAD.size
FOOTER_SIZE = _FOOTER.size
_UNPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the format")


def _refuse_map(pairs: Any) -> Any:
    raise ValueError("a map inside a frame record (records hold arrays, str, int and bin)")


@dataclass(frozen=True)
class ChangeSet:
    """The entries one log appended under one SQN, as `(key_group, payload)` pairs."""

    log_id: str
    sqn: int
    entries: tuple[tuple[int, bytes], ...]

    @property
    def size(self) -> int:
        return sum(len(payload) for _, payload in self.entries) + ENTRY_OVERHEAD * len(
            self.entries)

    @property
    def key_groups(self) -> tuple[int, ...]:
        return tuple(sorted({key_group for key_group, _ in self.entries}))


@dataclass(frozen=True)
class LogHeader:
    """Owner-supplied metadata of one log in a file (e.g. its lineage); msgpack types only."""

    log_id: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class FileHeader:
    format_version: int
    writer_id: str
    created_ms: int
    compression: str
    logs: tuple[LogHeader, ...]


@dataclass(frozen=True)
class FrameLocation:
    """Where one change set sits in its file: whole frame, header included."""

    log_id: str
    sqn: int
    offset: int
    length: int
    key_groups: tuple[int, ...]


@dataclass(frozen=True)
class EncodedFile:
    data: bytes
    header: FileHeader
    frames: tuple[FrameLocation, ...]


@dataclass(frozen=True)
class LogSummary:
    log_id: str
    first_sqn: int
    last_sqn: int
    change_sets: int
    entries: int
    payload_bytes: int
    stored_bytes: int


@dataclass(frozen=True)
class FileSummary:
    path: str
    header: FileHeader
    file_size: int
    frame_count: int
    logs: tuple[LogSummary, ...]


# --- encoding ----------------------------------------------------------------------------------


def encode_file(writer_id: str, logs: Sequence[tuple[LogHeader, Sequence[ChangeSet]]],
                compression: str = "none", level: int = 3,
                created_ms: int | None = None) -> EncodedFile:
    """One file holding each log's change sets contiguously, in the order given."""
    compressor = FrameCompressor(compression, level)
    _check_logs(logs)
    created = int(time.time() * 1000) if created_ms is None else created_ms
    header = FileHeader(FORMAT_VERSION, writer_id, created, compression,
                        tuple(log_header for log_header, _ in logs))
    header_bytes = _pack_header(header)
    preamble = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, compressor.codec, len(header_bytes))
    header_crc = crc32(header_bytes, crc32(preamble[len(MAGIC):]))
    parts = [preamble, header_bytes, _U32.pack(header_crc)]
    offset = PREAMBLE_SIZE + len(header_bytes) + _U32.size
    frames: list[FrameLocation] = []
    for _, change_sets in logs:
        for change_set in change_sets:
            record = msgpack.packb((change_set.log_id, change_set.sqn, change_set.entries),
                                   use_bin_type=True)
            codec, payload = compressor.compress(record)
            codec_byte = bytes((codec,))
            body_length = 1 + len(payload)
            if body_length > MAX_FRAME_LENGTH:
                raise FormatError(f"change set {change_set.sqn} of log {change_set.log_id!r} "
                                  f"encodes to {body_length} bytes (limit {MAX_FRAME_LENGTH})")
            body_crc = crc32(payload, crc32(codec_byte))
            parts += (_FRAME_HEAD.pack(body_length, body_crc), codec_byte, payload)
            length = FRAME_HEAD_SIZE + body_length
            frames.append(FrameLocation(change_set.log_id, change_set.sqn, offset, length,
                                        change_set.key_groups))
            offset += length
    footer = FOOTER_MAGIC + _U32.pack(len(frames))
    parts += (footer, _U32.pack(crc32(footer)))
    return EncodedFile(b"".join(parts), header, tuple(frames))


def _check_logs(logs: Sequence[tuple[LogHeader, Sequence[ChangeSet]]]) -> None:
    seen: set[str] = set()
    for log_header, change_sets in logs:
        log_id = log_header.log_id
        if not isinstance(log_id, str):
            raise FormatError(f"cannot encode log id {log_id!r}: not a str")
        if log_id in seen:
            raise FormatError(f"cannot encode log {log_id!r} twice in one file")
        seen.add(log_id)
        if not change_sets:
            raise FormatError(f"cannot encode log {log_id!r} without change sets")
        previous = -1
        for change_set in change_sets:
            _check_change_set(change_set, log_id, previous)
            previous = change_set.sqn


def _check_change_set(change_set: ChangeSet, log_id: str, previous: int) -> None:
    where = f"change set {change_set.sqn!r} of log {change_set.log_id!r}"
    if change_set.log_id != log_id:
        raise FormatError(f"cannot encode {where} under the header of log {log_id!r}")
    if not _valid_sqn(change_set.sqn) or change_set.sqn <= previous:
        raise FormatError(f"cannot encode {where}: SQNs must be ints in [0, {MAX_SQN}] and "
                          f"strictly increase within a log (previous {previous})")
    if not _entries_valid(change_set.entries):
        raise FormatError(f"cannot encode {where}: entries must be a tuple of "
                          f"(key_group int in [0, {MAX_KEY_GROUP}], payload bytes) tuples")


def _valid_sqn(sqn: object) -> bool:
    return type(sqn) is int and 0 <= sqn <= MAX_SQN


def _entries_valid(entries: object) -> bool:
    """Type check of all entries using C-level passes, not a Python loop per entry."""
    if type(entries) is not tuple:
        return False
    if not entries:
        return True
    if set(map(type, entries)) != {tuple} or set(map(len, entries)) != {2}:
        return False
    key_groups, payloads = zip(*entries, strict=True)
    return (set(map(type, key_groups)) == {int} and set(map(type, payloads)) == {bytes}
            and min(key_groups) >= 0 and max(key_groups) <= MAX_KEY_GROUP)


def _pack_header(header: FileHeader) -> bytes:
    logs = []
    for log in header.logs:
        if not isinstance(log.metadata, Mapping):
            raise FormatError(f"metadata of log {log.log_id!r} is not a mapping")
        logs.append({"log_id": log.log_id, "metadata": dict(log.metadata)})
    if not isinstance(header.writer_id, str) or type(header.created_ms) is not int:
        raise FormatError(f"cannot encode writer id {header.writer_id!r} / "
                          f"created_ms {header.created_ms!r}: need a str and an int")
    document = {"writer_id": header.writer_id, "created_ms": header.created_ms, "logs": logs}
    try:
        packed: bytes = msgpack.packb(document, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FormatError(f"header metadata is not msgpack-serializable: {exc}") from exc
    if len(packed) > MAX_HEADER_LENGTH:
        raise FormatError(f"header of {len(packed)} bytes exceeds {MAX_HEADER_LENGTH}")
    return packed


# --- decoding ----------------------------------------------------------------------------------


def decode_header(data: bytes | memoryview, path: str) -> tuple[FileHeader, int]:
    """The file header and the offset of the first frame; `data` may be a prefix of the file."""
    view = memoryview(data)
    size = len(view)
    codec, header_length = _check_preamble(view, path)
    end = PREAMBLE_SIZE + header_length
    if size < end + _U32.size:
        raise TruncatedFileError(f"header of {header_length} bytes and its CRC need "
                                 f"{end + _U32.size} bytes, got {size}", path, PREAMBLE_SIZE)
    (stored,) = _U32.unpack_from(view, end)
    actual = crc32(view[len(MAGIC):end])
    if stored != actual:
        raise ChecksumMismatchError(f"header CRC {actual:#010x} does not match stored "
                                    f"{stored:#010x}", path, end)
    compression = codec_name(codec, path, len(MAGIC) + 2)
    return _unpack_header(view[PREAMBLE_SIZE:end], compression, path), end + _U32.size


def decode_preamble(data: bytes | memoryview, path: str) -> int:
    """The offset of the first frame, from the first PREAMBLE_SIZE bytes alone.

    For ranged readers that skip the header: checks magic, version, header length and codec
    (the header's CRC needs the header, see decode_header).
    """
    codec, header_length = _check_preamble(memoryview(data), path)
    codec_name(codec, path, len(MAGIC) + 2)
    return PREAMBLE_SIZE + header_length + _U32.size


def _check_preamble(view: memoryview, path: str) -> tuple[int, int]:
    """(codec id, header length) once magic, version and the length limit are checked."""
    size = len(view)
    if view[:len(MAGIC)] != MAGIC[:size]:
        raise BadMagicError(f"not a changelog file: starts with {bytes(view[:8])!r}, "
                            f"expected {MAGIC!r}", path, 0)
    if size < PREAMBLE_SIZE:
        raise TruncatedFileError(f"file preamble needs {PREAMBLE_SIZE} bytes, got {size}",
                                 path, 0)
    _, version, codec, header_length = _PREAMBLE.unpack_from(view)
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(f"changelog format version {version} is not supported "
                                      f"(this library reads version {FORMAT_VERSION})",
                                      path, len(MAGIC))
    if header_length > MAX_HEADER_LENGTH:
        raise FormatError(f"header length {header_length} exceeds {MAX_HEADER_LENGTH}",
                          path, PREAMBLE_SIZE - _U32.size)
    return codec, header_length


def _unpack_header(view: memoryview, compression: str, path: str) -> FileHeader:
    try:
        document = msgpack.unpackb(view, raw=False, strict_map_key=False,
                                   ext_hook=_refuse_ext)
        logs = tuple(LogHeader(log["log_id"], log["metadata"]) for log in document["logs"])
        header = FileHeader(FORMAT_VERSION, document["writer_id"], document["created_ms"],
                            compression, logs)
    except (*_UNPACK_ERRORS, KeyError) as exc:
        raise FormatError(f"header cannot be decoded: {excerpt(exc)}", path,
                          PREAMBLE_SIZE) from exc
    names = [log.log_id for log in header.logs]
    if (not isinstance(header.writer_id, str) or type(header.created_ms) is not int
            or not all(isinstance(n, str) for n in names)
            or not all(isinstance(log.metadata, dict) for log in header.logs)
            or len(set(names)) != len(names)):
        raise FormatError("header has wrong field types or repeats a log id", path,
                          PREAMBLE_SIZE)
    return header


def iter_frames(data: bytes | memoryview, path: str,
                base_offset: int) -> Iterator[tuple[int, ChangeSet]]:
    """(absolute offset, change set) of each whole frame in `data`, which starts at base_offset."""
    view = memoryview(data)
    position, end = 0, len(view)
    while position < end:
        change_set, length = _decode_frame(view, path, base_offset, position, end)
        yield base_offset + position, change_set
        position += length


def decode_frames(data: bytes | memoryview, path: str, base_offset: int) -> list[ChangeSet]:
    """Change sets of a segment: `data` is consecutive whole frames from file offset base_offset."""
    return [change_set for _, change_set in iter_frames(data, path, base_offset)]


def _decode_frame(view: memoryview, path: str, base: int, position: int,
                  end: int) -> tuple[ChangeSet, int]:
    at = base + position
    if end - position < FRAME_HEAD_SIZE:
        raise TruncatedFileError(f"frame header needs {FRAME_HEAD_SIZE} bytes, "
                                 f"{end - position} remain", path, at)
    body_length, stored = _FRAME_HEAD.unpack_from(view, position)
    if not 1 <= body_length <= MAX_FRAME_LENGTH:
        raise FormatError(f"frame body length {body_length} outside 1..{MAX_FRAME_LENGTH}",
                          path, at)
    stop = position + FRAME_HEAD_SIZE + body_length
    if stop > end:
        raise TruncatedFileError(f"frame body of {body_length} bytes is cut off after "
                                 f"{end - position - FRAME_HEAD_SIZE}", path, at)
    body = view[position + FRAME_HEAD_SIZE:stop]
    actual = crc32(body)
    if actual != stored:
        raise ChecksumMismatchError(f"frame CRC {actual:#010x} does not match stored "
                                    f"{stored:#010x}", path, at)
    record = decompress(body[0], body[1:], MAX_FRAME_LENGTH, path, at)
    try:
        log_id, sqn, entries = msgpack.unpackb(record, use_list=False, raw=False,
                                               ext_hook=_refuse_ext,
                                               object_pairs_hook=_refuse_map)
    except _UNPACK_ERRORS as exc:
        raise FormatError(f"frame record cannot be decoded: {excerpt(exc)}", path,
                          at) from exc
    if type(log_id) is not str or not _valid_sqn(sqn) or not _entries_valid(entries):
        raise FormatError("frame record is not [log_id str, sqn int, [[key_group, payload]]]",
                          path, at)
    return ChangeSet(log_id, sqn, entries), FRAME_HEAD_SIZE + body_length


def read_file(data: bytes | memoryview, path: str) -> tuple[FileHeader, list[ChangeSet]]:
    """Decode a whole file, verifying every checksum, the footer and the per-log layout."""
    header, frames = read_file_located(data, path)
    return header, [change_set for _, _, change_set in frames]


def verify_file(data: bytes | memoryview, path: str) -> FileSummary:
    """Check a whole file like read_file and summarize it per log."""
    header, frames = read_file_located(data, path)
    logs = []
    for log in header.logs:
        mine = [(length, cs) for _, length, cs in frames if cs.log_id == log.log_id]
        logs.append(LogSummary(
            log_id=log.log_id,
            first_sqn=mine[0][1].sqn,
            last_sqn=mine[-1][1].sqn,
            change_sets=len(mine),
            entries=sum(len(cs.entries) for _, cs in mine),
            payload_bytes=sum(len(p) for _, cs in mine for _, p in cs.entries),
            stored_bytes=sum(length for length, _ in mine),
        ))
    return FileSummary(path, header, len(memoryview(data)), len(frames), tuple(logs))


def read_file_located(data: bytes | memoryview,
                      path: str) -> tuple[FileHeader, list[tuple[int, int, ChangeSet]]]:
    """Check a whole file like read_file; each change set with its frame's (offset, length)."""
    header, position = decode_header(data, path)
    view = memoryview(data)
    size = len(view)
    frames: list[tuple[int, int, ChangeSet]] = []
    while True:
        rest = size - position
        head = bytes(view[position:position + len(FOOTER_MAGIC)])
        if rest == FOOTER_SIZE and head == FOOTER_MAGIC:
            break
        if head == FOOTER_MAGIC and FOOTER_SIZE < rest < FRAME_HEAD_SIZE + _AS_FRAME_LENGTH:
            raise FormatError(f"{rest - FOOTER_SIZE} bytes follow the footer", path, position)
        if rest < FOOTER_SIZE and FOOTER_MAGIC.startswith(head):
            raise TruncatedFileError(f"file ends without a complete footer after "
                                     f"{len(frames)} frames", path, position)
        change_set, length = _decode_frame(view, path, 0, position, size)
        frames.append((position, length, change_set))
        position += length
    _, count, stored = _FOOTER.unpack_from(view, position)
    actual = crc32(view[position:position + FOOTER_SIZE - _U32.size])
    if actual != stored:
        raise ChecksumMismatchError(f"footer CRC {actual:#010x} does not match stored "
                                    f"{stored:#010x}", path, position)
    if count != len(frames):
        raise FormatError(f"footer counts {count} frames but the file holds {len(frames)}",
                          path, position)
    _check_layout(header, frames, path)
    return header, frames


def _check_layout(header: FileHeader, frames: list[tuple[int, int, ChangeSet]],
                  path: str) -> None:
    """Each declared log has frames, contiguous, in header order, with increasing SQNs."""
    expected = [log.log_id for log in header.logs]
    runs: list[str] = []
    previous_sqn = -1
    for offset, _, change_set in frames:
        if not runs or runs[-1] != change_set.log_id:
            runs.append(change_set.log_id)
            if len(runs) > len(expected) or expected[len(runs) - 1] != change_set.log_id:
                raise FormatError(f"frame of log {change_set.log_id!r} is out of place: the "
                                  f"header declares logs {expected}", path, offset)
        elif change_set.sqn <= previous_sqn:
            raise FormatError(f"SQN {change_set.sqn} of log {change_set.log_id!r} does not "
                              f"follow SQN {previous_sqn}", path, offset)
        previous_sqn = change_set.sqn
    if runs != expected:
        missing = expected[len(runs):]
        raise FormatError(f"header declares logs {missing} that have no frames", path)
