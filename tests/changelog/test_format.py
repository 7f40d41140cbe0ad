"""Changelog file format v1: round trips, layout, and every way a file can be damaged."""

from __future__ import annotations

import random
import re
import struct
import zlib
from collections.abc import Sequence

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_dstl.changelog.changelog_errors import (
    BadMagicError,
    ChecksumMismatchError,
    FormatError,
    TruncatedFileError,
    UnsupportedVersionError,
)
from pyspark_dstl.changelog.compression import CODEC_ZSTD, MAX_EXPANSION, decompress
from pyspark_dstl.changelog.format import (
    ENTRY_OVERHEAD,
    FOOTER_SIZE,
    MAGIC,
    MAX_FRAME_LENGTH,
    PREAMBLE_SIZE,
    ChangeSet,
    EncodedFile,
    LogHeader,
    decode_frames,
    decode_header,
    encode_file,
    read_file,
    verify_file,
)

PATH = "state/op/3/7_ab12.changelog"
Logs = list[tuple[LogHeader, list[ChangeSet]]]


def make_logs(seed: int, logs: int = 3, sets: int = 4, entries: int = 5) -> Logs:
    rng = random.Random(seed)
    result: Logs = []
    for number in range(logs):
        log_id = f"op/{number}/store"
        first = rng.randrange(0, 1000)
        change_sets = [
            ChangeSet(log_id, first + index, tuple(
                (rng.randrange(0, 128), rng.randbytes(rng.randrange(0, 64)))
                for _ in range(entries)))
            for index in range(sets)
        ]
        metadata = {"version": number + 7, "unique_id": f"u{number}",
                    "lineage": [[number + 5, "ab"], [number + 6, "cd"]]}
        result.append((LogHeader(log_id, metadata), change_sets))
    return result


def all_change_sets(logs: Sequence[tuple[LogHeader, Sequence[ChangeSet]]]) -> list[ChangeSet]:
    return [change_set for _, change_sets in logs for change_set in change_sets]


def header_length(data: bytes) -> int:
    (length,) = struct.unpack_from(">I", data, 12)
    return int(length)


def flip(data: bytes, offset: int) -> bytes:
    changed = bytearray(data)
    changed[offset] ^= 0x40
    return bytes(changed)


def reseal_header(data: bytearray) -> None:
    end = PREAMBLE_SIZE + header_length(bytes(data))
    struct.pack_into(">I", data, end, zlib.crc32(data[8:end]))


def at(offset: int) -> str:
    return re.escape(f"(file {PATH!r} at offset {offset})")


@pytest.fixture
def encoded() -> EncodedFile:
    return encode_file("host:42:w1", make_logs(seed=1), created_ms=1_700_000_000_000)


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_round_trip_keeps_every_log_and_change_set_in_order(compression: str) -> None:
    logs = make_logs(seed=2)
    data = encode_file("host:1:w", logs, compression=compression).data
    header, change_sets = read_file(data, PATH)
    assert change_sets == all_change_sets(logs)
    assert header.logs == tuple(log_header for log_header, _ in logs)
    assert header.compression == compression


def test_header_fields_round_trip() -> None:
    logs = make_logs(seed=3, logs=2)
    header, _ = decode_header(encode_file("host:7:abc", logs, created_ms=123).data, PATH)
    assert (header.format_version, header.writer_id, header.created_ms) == (1, "host:7:abc", 123)
    assert [dict(log.metadata) for log in header.logs] == [dict(h.metadata) for h, _ in logs]


def test_decode_header_returns_offset_of_first_frame(encoded: EncodedFile) -> None:
    first = encoded.frames[0].offset
    header, offset = decode_header(encoded.data[:first], PATH)
    assert offset == first
    assert header == encoded.header


def test_empty_payloads_round_trip() -> None:
    change_sets = [ChangeSet("log", sqn, ((sqn % 3, b""), (9, b""))) for sqn in range(4)]
    data = encode_file("w", [(LogHeader("log", {}), change_sets)]).data
    assert read_file(data, PATH)[1] == change_sets


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_large_payload_round_trips(compression: str) -> None:
    rng = random.Random(4)
    payload = rng.randbytes(2_500_000) + bytes(2_500_000)
    change_sets = [ChangeSet("big", 0, ((1, payload),)), ChangeSet("big", 1, ((2, b"tail"),))]
    data = encode_file("w", [(LogHeader("big", {}), change_sets)], compression=compression).data
    assert read_file(data, PATH)[1] == change_sets


def test_zstd_makes_compressible_files_smaller() -> None:
    change_sets = [ChangeSet("log", 0, tuple((k, b"state-value " * 50) for k in range(20)))]
    logs = [(LogHeader("log", {}), change_sets)]
    plain = encode_file("w", logs, compression="none").data
    packed = encode_file("w", logs, compression="zstd").data
    assert len(packed) < len(plain) // 4
    assert read_file(packed, PATH)[1] == change_sets


def test_zstd_stores_incompressible_frames_raw() -> None:
    change_sets = [ChangeSet("log", 0, ((0, random.Random(5).randbytes(10_000)),))]
    logs = [(LogHeader("log", {}), change_sets)]
    plain = encode_file("w", logs, compression="none", created_ms=1).data
    packed = encode_file("w", logs, compression="zstd", created_ms=1).data
    assert len(packed) == len(plain)
    assert read_file(packed, PATH)[1] == change_sets


def test_zstd_stores_a_record_that_would_expand_past_the_cap_raw() -> None:
    change_sets = [ChangeSet("log", 0, ((0, bytes(MAX_EXPANSION * 4096)),))]
    logs = [(LogHeader("log", {}), change_sets)]
    plain = encode_file("w", logs, compression="none", created_ms=1).data
    packed = encode_file("w", logs, compression="zstd", created_ms=1).data
    assert len(packed) == len(plain), "zeros compress far past 256x: the frame stays raw"
    assert read_file(packed, PATH)[1] == change_sets


def test_a_zstd_frame_declaring_more_than_the_cap_is_refused_before_decompressing() -> None:
    record = bytes(MAX_EXPANSION * 4096)
    frame = zstandard.ZstdCompressor().compress(record)
    assert len(record) > MAX_EXPANSION * len(frame)
    with pytest.raises(FormatError, match=f"declares {len(record)} bytes, more than "
                                          f"{MAX_EXPANSION} times its size"):
        decompress(CODEC_ZSTD, memoryview(frame), MAX_FRAME_LENGTH, PATH, 20)


@settings(max_examples=50, deadline=None)
@given(st.lists(
    st.tuples(
        st.text(min_size=1, max_size=8),
        st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text()),
        st.lists(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=40)),
                          max_size=4), min_size=1, max_size=4),
    ),
    min_size=1, max_size=4, unique_by=lambda log: log[0],
), st.sampled_from(["none", "zstd"]))
def test_any_logs_round_trip(
    raw_logs: list[tuple[str, dict[str, object], list[list[tuple[int, bytes]]]]],
    compression: str,
) -> None:
    logs = [(LogHeader(log_id, metadata),
             [ChangeSet(log_id, sqn * 2, tuple(entries)) for sqn, entries in enumerate(sets)])
            for log_id, metadata, sets in raw_logs]
    encoded = encode_file("w", logs, compression=compression)
    header, change_sets = read_file(encoded.data, PATH)
    assert change_sets == all_change_sets(logs)
    assert header.logs == tuple(log_header for log_header, _ in logs)
    for location, change_set in zip(encoded.frames, change_sets, strict=True):
        piece = encoded.data[location.offset:location.offset + location.length]
        assert decode_frames(piece, PATH, location.offset) == [change_set]


# --- frames and segments -----------------------------------------------------------------------


def test_frame_locations_describe_each_change_set(encoded: EncodedFile) -> None:
    change_sets = read_file(encoded.data, PATH)[1]
    assert [(f.log_id, f.sqn, f.key_groups) for f in encoded.frames] == [
        (cs.log_id, cs.sqn, cs.key_groups) for cs in change_sets]
    for before, after in zip(encoded.frames, encoded.frames[1:], strict=False):
        assert after.offset == before.offset + before.length
    assert encoded.frames[-1].offset + encoded.frames[-1].length == len(encoded.data) - FOOTER_SIZE


def test_decode_frames_reads_a_segment_slice(encoded: EncodedFile) -> None:
    middle = encoded.frames[5:9]
    start, end = middle[0].offset, middle[-1].offset + middle[-1].length
    expected = read_file(encoded.data, PATH)[1][5:9]
    assert decode_frames(encoded.data[start:end], PATH, start) == expected


def test_decode_frames_names_the_absolute_offset_of_a_bad_frame(encoded: EncodedFile) -> None:
    segment, bad = encoded.frames[4:8], encoded.frames[6]
    start, end = segment[0].offset, segment[-1].offset + segment[-1].length
    damaged = flip(encoded.data, bad.offset + bad.length - 1)
    with pytest.raises(ChecksumMismatchError, match=at(bad.offset)):
        decode_frames(damaged[start:end], PATH, start)


def test_decode_frames_of_a_cut_segment_raises_truncated(encoded: EncodedFile) -> None:
    first, last = encoded.frames[0], encoded.frames[2]
    cut = encoded.data[first.offset:last.offset + last.length // 2]
    with pytest.raises(TruncatedFileError, match=at(last.offset)):
        decode_frames(cut, PATH, first.offset)


# --- damage ------------------------------------------------------------------------------------


def test_flipped_header_byte_raises_checksum_mismatch(encoded: EncodedFile) -> None:
    length = header_length(encoded.data)
    damaged = flip(encoded.data, PREAMBLE_SIZE + length // 2)
    with pytest.raises(ChecksumMismatchError, match=at(PREAMBLE_SIZE + length)):
        read_file(damaged, PATH)


def test_flipped_frame_body_byte_raises_checksum_mismatch(encoded: EncodedFile) -> None:
    frame = encoded.frames[3]
    damaged = flip(encoded.data, frame.offset + frame.length // 2 + 4)
    with pytest.raises(ChecksumMismatchError, match=at(frame.offset)):
        read_file(damaged, PATH)


def test_flipped_footer_byte_raises_checksum_mismatch(encoded: EncodedFile) -> None:
    footer = len(encoded.data) - FOOTER_SIZE
    with pytest.raises(ChecksumMismatchError, match=at(footer)):
        read_file(flip(encoded.data, footer + 9), PATH)


def test_truncation_inside_preamble_raises_truncated(encoded: EncodedFile) -> None:
    with pytest.raises(TruncatedFileError, match=at(0)):
        read_file(encoded.data[:11], PATH)


def test_truncation_inside_header_raises_truncated(encoded: EncodedFile) -> None:
    cut = encoded.data[:PREAMBLE_SIZE + header_length(encoded.data) // 2]
    with pytest.raises(TruncatedFileError, match=at(PREAMBLE_SIZE)):
        read_file(cut, PATH)


def test_truncation_inside_a_frame_raises_truncated(encoded: EncodedFile) -> None:
    frame = encoded.frames[7]
    with pytest.raises(TruncatedFileError, match=at(frame.offset)):
        read_file(encoded.data[:frame.offset + frame.length - 1], PATH)


def test_truncation_at_any_frame_boundary_raises_truncated(encoded: EncodedFile) -> None:
    for frame in encoded.frames:
        end = frame.offset + frame.length
        with pytest.raises(TruncatedFileError, match="without a complete footer.*" + at(end)):
            read_file(encoded.data[:end], PATH)


def test_truncation_inside_footer_raises_truncated(encoded: EncodedFile) -> None:
    footer = len(encoded.data) - FOOTER_SIZE
    with pytest.raises(TruncatedFileError, match=at(footer)):
        verify_file(encoded.data[:-3], PATH)


def test_bytes_after_the_footer_raise_format_error(encoded: EncodedFile) -> None:
    footer = len(encoded.data) - FOOTER_SIZE
    with pytest.raises(FormatError, match="5 bytes follow the footer.*" + at(footer)):
        read_file(encoded.data + b"extra", PATH)


def test_wrong_magic_raises_bad_magic(encoded: EncodedFile) -> None:
    with pytest.raises(BadMagicError, match=at(0)):
        read_file(b"PK\x03\x04" + encoded.data[4:], PATH)


def test_future_version_raises_unsupported_version_naming_it(encoded: EncodedFile) -> None:
    future = bytearray(encoded.data)
    struct.pack_into(">H", future, len(MAGIC), 99)
    with pytest.raises(UnsupportedVersionError, match=r"version 99 .*" + at(len(MAGIC))):
        read_file(bytes(future), PATH)


def test_unknown_file_codec_raises_format_error(encoded: EncodedFile) -> None:
    changed = bytearray(encoded.data)
    struct.pack_into(">H", changed, len(MAGIC) + 2, 7)
    reseal_header(changed)
    with pytest.raises(FormatError, match="codec id 7"):
        read_file(bytes(changed), PATH)


def test_unknown_frame_codec_raises_format_error(encoded: EncodedFile) -> None:
    frame = encoded.frames[2]
    changed = bytearray(encoded.data)
    changed[frame.offset + 8] = 9
    body = changed[frame.offset + 8:frame.offset + frame.length]
    struct.pack_into(">I", changed, frame.offset + 4, zlib.crc32(body))
    with pytest.raises(FormatError, match="codec id 9.*" + at(frame.offset)):
        read_file(bytes(changed), PATH)


def test_frame_length_beyond_limit_raises_format_error(encoded: EncodedFile) -> None:
    frame = encoded.frames[1]
    changed = bytearray(encoded.data)
    struct.pack_into(">I", changed, frame.offset, 2**32 - 1)
    with pytest.raises(FormatError, match="length 4294967295 outside.*" + at(frame.offset)):
        read_file(bytes(changed), PATH)


def test_header_length_beyond_limit_raises_format_error(encoded: EncodedFile) -> None:
    changed = bytearray(encoded.data)
    struct.pack_into(">I", changed, 12, 2**31)
    with pytest.raises(FormatError, match="header length 2147483648 exceeds"):
        read_file(bytes(changed), PATH)


def test_footer_with_wrong_frame_count_raises_format_error(encoded: EncodedFile) -> None:
    changed = bytearray(encoded.data)
    footer = len(changed) - FOOTER_SIZE
    struct.pack_into(">I", changed, footer + 8, len(encoded.frames) + 1)
    struct.pack_into(">I", changed, footer + 12, zlib.crc32(changed[footer:footer + 12]))
    with pytest.raises(FormatError, match=f"counts {len(encoded.frames) + 1} frames"):
        read_file(bytes(changed), PATH)


def test_frames_out_of_header_order_raise_format_error(encoded: EncodedFile) -> None:
    frames, data = encoded.frames, encoded.data
    first_log = [f for f in frames if f.log_id == frames[0].log_id]
    rest = [f for f in frames if f.log_id != frames[0].log_id]
    body = b"".join(data[f.offset:f.offset + f.length] for f in rest + first_log)
    reordered = data[:frames[0].offset] + body + data[-FOOTER_SIZE:]
    with pytest.raises(FormatError, match="out of place.*" + at(frames[0].offset)):
        read_file(reordered, PATH)


# --- verify ------------------------------------------------------------------------------------


def test_verify_file_summarizes_each_log() -> None:
    logs = make_logs(seed=6, logs=2, sets=3, entries=4)
    encoded = encode_file("w", logs, compression="zstd")
    summary = verify_file(encoded.data, PATH)
    assert (summary.path, summary.file_size, summary.frame_count) == (
        PATH, len(encoded.data), len(encoded.frames))
    for log, (log_header, change_sets) in zip(summary.logs, logs, strict=True):
        frames = [f for f in encoded.frames if f.log_id == log_header.log_id]
        assert (log.log_id, log.first_sqn, log.last_sqn, log.change_sets) == (
            log_header.log_id, change_sets[0].sqn, change_sets[-1].sqn, len(change_sets))
        assert log.entries == sum(len(cs.entries) for cs in change_sets)
        assert log.payload_bytes == sum(len(p) for cs in change_sets for _, p in cs.entries)
        assert log.stored_bytes == sum(f.length for f in frames)


# --- encoding rules ----------------------------------------------------------------------------


def test_encode_rejects_change_set_of_another_log() -> None:
    with pytest.raises(FormatError, match="under the header of log 'a'"):
        encode_file("w", [(LogHeader("a", {}), [ChangeSet("b", 0, ((0, b"x"),))])])


def test_encode_rejects_a_log_twice() -> None:
    change_sets = [ChangeSet("a", 0, ((0, b"x"),))]
    with pytest.raises(FormatError, match="twice"):
        encode_file("w", [(LogHeader("a", {}), change_sets), (LogHeader("a", {}), change_sets)])


def test_encode_rejects_sqns_that_do_not_increase() -> None:
    change_sets = [ChangeSet("a", 3, ((0, b"x"),)), ChangeSet("a", 3, ((0, b"y"),))]
    with pytest.raises(FormatError, match="strictly increase"):
        encode_file("w", [(LogHeader("a", {}), change_sets)])


def test_encode_rejects_payload_that_is_not_bytes() -> None:
    change_sets = [ChangeSet("a", 0, ((0, "text"),))]  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="payload bytes"):
        encode_file("w", [(LogHeader("a", {}), change_sets)])


def test_encode_rejects_metadata_msgpack_cannot_hold() -> None:
    change_sets = [ChangeSet("a", 0, ((0, b"x"),))]
    with pytest.raises(FormatError, match="msgpack"):
        encode_file("w", [(LogHeader("a", {"when": object()}), change_sets)])


def test_encode_rejects_unknown_compression() -> None:
    with pytest.raises(FormatError, match="unknown compression 'lz4'"):
        encode_file("w", [(LogHeader("a", {}), [ChangeSet("a", 0, ())])], compression="lz4")


def test_encode_rejects_log_without_change_sets() -> None:
    with pytest.raises(FormatError, match="without change sets"):
        encode_file("w", [(LogHeader("a", {}), [])])


# --- change sets -------------------------------------------------------------------------------


def test_change_set_size_counts_payloads_and_entry_overhead() -> None:
    payloads = [b"abc", b"", b"0123456789"]
    change_set = ChangeSet("a", 0, tuple((i, p) for i, p in enumerate(payloads)))
    assert change_set.size == sum(map(len, payloads)) + ENTRY_OVERHEAD * len(payloads)


def test_change_set_key_groups_are_sorted_and_distinct() -> None:
    groups = [5, 1, 5, 3, 1]
    change_set = ChangeSet("a", 0, tuple((g, b"") for g in groups))
    assert change_set.key_groups == tuple(sorted(set(groups)))
