"""Crafted files: whatever a file declares, decoding it costs a bounded multiple of its size.

    python -m tests.reliability.crafted            # a table of every case
    python -m tests.reliability.crafted --json     # what test_crafted_files.py reads

Each case is a small file of one kind (changelog, change payload of either version, snapshot
manifest, commit log entry, epoch file) that declares far more than it holds: huge sizes,
counts and lengths, deep nesting, unknown extension types, a compressed frame that expands
2^15 times. Each is decoded
the way loads, `verify` and the tools decode it; the run records the error, the length of its
message, the peak of Python allocations during the decode (tracemalloc: the decoders allocate
through Python, zstd's output buffer included) and the time. Run in a process of its own so
nothing else counts.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from zlib import crc32

import msgpack
import zstandard

MIB = 1 << 20
LOG_ID = "agg/0"
HEADER = {"writer_id": "crafted", "created_ms": 0,
          "logs": [{"log_id": LOG_ID, "metadata": {}}]}


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # which decoder: changelog, payload, manifest, commit_entry, epoch
    build: Callable[[], bytes]
    declares: str  # what it claims, for the table


@dataclass
class Outcome:
    name: str
    kind: str
    declares: str
    file_bytes: int
    error: str  # the exception type ("" when it decoded)
    message_chars: int
    peak_bytes: int
    seconds: float


# --- building files ----------------------------------------------------------------------------


def changelog(frames: Sequence[tuple[int, bytes]], *, header: bytes | None = None,
              header_length: int | None = None, count: int | None = None) -> bytes:
    """A changelog file with every CRC right: frames are (codec, encoded record)."""
    header = msgpack.packb(HEADER) if header is None else header
    preamble = struct.pack(">8sHHI", b"DSTLCLOG", 1, 1,
                           len(header) if header_length is None else header_length)
    parts = [preamble, header, struct.pack(">I", crc32(preamble[8:] + header))]
    for codec, record in frames:
        body = bytes([codec]) + record
        parts += [struct.pack(">II", len(body), crc32(body)), body]
    footer = b"DSTLTAIL" + struct.pack(">I", len(frames) if count is None else count)
    parts += [footer, struct.pack(">I", crc32(footer))]
    return b"".join(parts)


def zstd_bomb(size: int) -> bytes:
    """A real zstd frame of `size` zero bytes (it records its content size)."""
    compressor = zstandard.ZstdCompressor(level=19 if size <= 64 * MIB else 3)
    stream = compressor.compressobj(size=size)
    chunk = bytes(MIB)
    parts = []
    for start in range(0, size, MIB):
        parts.append(stream.compress(chunk[:min(MIB, size - start)]))
    parts.append(stream.flush())
    return b"".join(parts)


def record(entries: bytes) -> bytes:
    """[log_id, sqn, <entries>] with the entries array given already packed."""
    return b"\x93" + msgpack.packb(LOG_ID) + b"\x00" + entries


def columnar(blocks: int, block: bytes, tail: bytes = b"") -> bytes:
    """A version-2 (columnar) change payload: marker of version 1, no base, then the blocks."""
    return (b"\xc1\x02" + struct.pack("<QI", 1, 1) + b"u" + b"\x00" + struct.pack("<I", blocks)
            + block + tail)


def column_block(count: int, ops: bytes, key_offsets: Sequence[int], keys: bytes = b"",
                 value_offsets: Sequence[int] = (0,), values: bytes = b"") -> bytes:
    return (struct.pack("<H", 7) + b"default" + struct.pack("<I", count) + ops
            + struct.pack(f"<{len(key_offsets)}I", *key_offsets) + keys
            + struct.pack(f"<{len(value_offsets)}I", *value_offsets) + values)


def manifest(body: bytes) -> bytes:
    return struct.pack(">8sHII", b"DSTLSNAP", 1, len(body), crc32(body)) + body


def json_document(magic: str, body: str) -> bytes:
    """A JSON document whose body is `body` verbatim (its checksum cannot match: decoding
    must fail cheaply on the way there)."""
    return (f'{{"magic": "{magic}", "format_version": 1, "checksum": "sha256:0", '
            f'"entry": {body}, "body": {body}}}').encode()


DEEP = 200_000
CASES: tuple[Case, ...] = (
    Case("changelog_zstd_64mib", "changelog",
         lambda: changelog([(1, zstd_bomb(64 * MIB))]), "a zstd frame of 64 MiB"),
    Case("changelog_zstd_2gib", "changelog",
         lambda: changelog([(1, zstd_bomb(2**31 - 2))]), "a zstd frame of 2 GiB"),
    Case("changelog_zstd_lying_size", "changelog",
         lambda: changelog([(1, zstandard.ZstdCompressor().compress(bytes(4096))[:6]
                             + struct.pack("<I", 2**31 - 2) + bytes(64))]),
         "a zstd header claiming 2 GiB over 64 bytes"),
    Case("changelog_header_length_64mib", "changelog",
         lambda: changelog([], header_length=64 * MIB), "a header of 64 MiB"),
    Case("changelog_header_deep", "changelog",
         lambda: changelog([], header=b"\x91" * DEEP + b"\xc0"), f"{DEEP} nested arrays"),
    Case("changelog_header_map_count", "changelog",
         lambda: changelog([], header=b"\xdf\xff\xff\xff\xff"), "a map of 2^32-1 pairs"),
    Case("changelog_header_ext", "changelog",
         lambda: changelog([], header=msgpack.packb(
             {**HEADER, "logs": [{"log_id": LOG_ID,
                                  "metadata": {"x": msgpack.ExtType(42, bytes(64))}}]})),
         "an unknown ext type"),
    Case("changelog_frame_length", "changelog",
         lambda: changelog([(0, b"")])[:-20] + struct.pack(">II", 2**31 - 1, 0) + bytes(8),
         "a frame of 2^31-1 bytes"),
    Case("changelog_frame_count", "changelog",
         lambda: changelog([], count=2**32 - 1), "2^32-1 frames"),
    Case("changelog_record_array_count", "changelog",
         lambda: changelog([(0, record(b"\xdd\xff\xff\xff\xff"))]), "2^32-1 entries"),
    Case("changelog_record_bin_length", "changelog",
         lambda: changelog([(0, record(b"\x91\x92\x00\xc6\x7f\xff\xff\xff"))]),
         "a payload of 2^31-1 bytes"),
    Case("changelog_record_deep", "changelog",
         lambda: changelog([(0, record(b"\x91" * DEEP + b"\xc0"))]), f"{DEEP} nested arrays"),
    Case("changelog_record_maps", "changelog",
         lambda: changelog([(0, record(b"\xdd" + struct.pack(">I", MIB) + b"\x80" * MIB))]),
         "a million empty maps"),
    Case("changelog_record_ext", "changelog",
         lambda: changelog([(0, record(b"\x91\x92\x00" + msgpack.packb(
             msgpack.ExtType(7, bytes(MIB)))))]), "an unknown ext type of 1 MiB"),
    Case("changelog_record_extra", "changelog",
         lambda: changelog([(0, b"\x00" * MIB)]), "1 MiB after the record"),
    Case("payload_array_count", "payload", lambda: b"\xdd\xff\xff\xff\xff", "2^32-1 records"),
    Case("payload_deep", "payload", lambda: b"\x91" * DEEP + b"\xc0", f"{DEEP} nested arrays"),
    Case("payload_extra", "payload", lambda: b"\x00" * MIB, "1 MiB after the payload"),
    Case("payload_ext", "payload",
         lambda: msgpack.packb([msgpack.ExtType(3, bytes(MIB))]), "an ext type of 1 MiB"),
    Case("columnar_block_count", "payload", lambda: columnar(2**32 - 1, b""),
         "2^32-1 column blocks"),
    Case("columnar_record_count", "payload",
         lambda: columnar(1, column_block(2**32 - 1, b"\x01" * 1024, [0] * 64)),
         "2^32-1 records in a block"),
    Case("columnar_key_bytes", "payload",
         lambda: columnar(1, column_block(1, b"\x01", [0, 2**32 - 1], b"k" * 1024)),
         "4 GiB of keys"),
    Case("columnar_value_bytes", "payload",
         lambda: columnar(1, column_block(1, b"\x01", [0, 1], b"k", [0, 2**32 - 1])),
         "4 GiB of values"),
    Case("columnar_falling_offsets", "payload",
         lambda: columnar(1, column_block(2**16, b"\x01" * 2**16,
                                          [0] + [2**20] + [0] * (2**16 - 1), bytes(MIB))),
         "offsets that fall back to 0"),
    Case("columnar_cf_length", "payload",
         lambda: columnar(1, struct.pack("<H", 65535) + b"c" * 64), "a 64 KiB cf name"),
    Case("columnar_extra", "payload",
         lambda: columnar(1, column_block(0, b"", [0]), b"\x00" * MIB),
         "1 MiB after the blocks"),
    Case("manifest_body_length", "manifest",
         lambda: struct.pack(">8sHII", b"DSTLSNAP", 1, 256 * MIB, 0), "a body of 256 MiB"),
    Case("manifest_array_count", "manifest",
         lambda: manifest(b"\xdd\xff\xff\xff\xff"), "2^32-1 items"),
    Case("manifest_deep", "manifest", lambda: manifest(b"\x91" * DEEP + b"\xc0"),
         f"{DEEP} nested arrays"),
    Case("manifest_ext", "manifest",
         lambda: manifest(msgpack.packb({"files": msgpack.ExtType(9, bytes(MIB))})),
         "an ext type of 1 MiB"),
    Case("manifest_huge_file_entry", "manifest",
         lambda: manifest(msgpack.packb({
             "store_id": LOG_ID, "version": 1, "unique_id": "a", "sqn": 0, "lineage": [],
             "files": [list(range(MIB))], "column_families": [], "key_counts": {},
             "rocksdb": {}, "created_ms": 0, "metadata": {}})),
         "a file entry of a million items"),
    Case("commit_entry_deep", "commit_entry",
         lambda: json_document("DSTL-COMMIT", "[" * DEEP + "]" * DEEP),
         f"{DEEP} nested arrays"),
    Case("commit_entry_huge_string", "commit_entry",
         lambda: json.dumps({"magic": "X" * (8 * MIB)}).encode(), "an 8 MiB magic"),
    Case("epoch_deep", "epoch", lambda: json_document("DSTL-EPOCH", "[" * DEEP + "]" * DEEP),
         f"{DEEP} nested arrays"),
)


# --- decoding ----------------------------------------------------------------------------------


def decoder(kind: str) -> Callable[[bytes], Any]:
    """How loads, `verify` and the tools decode a file of this kind."""
    if kind == "changelog":
        from pyspark_dstl.changelog.format import verify_file
        return lambda data: verify_file(data, "state/agg/0/1_crafted.changelog")
    if kind == "payload":
        from pyspark_dstl.backend.engines.columns import decode_change_blocks
        return lambda data: decode_change_blocks(data, "change set 0 in 'crafted'")
    if kind == "manifest":
        from pyspark_dstl.materializer.manifest import decode_manifest
        return lambda data: decode_manifest(data, "state/agg/0/1_crafted.snapshot")
    if kind == "commit_entry":
        from pyspark_dstl.backend.lineage.commit_entry import decode_record
        return lambda data: decode_record(data, "commits/0.0")
    if kind == "epoch":
        from pyspark_dstl.backend.fencing.epochs import decode_epoch
        return lambda data: decode_epoch(data, "epochs/1")
    raise ValueError(f"unknown kind {kind!r}")


def measure(case: Case) -> Outcome:
    """Decode twice: timed without tracemalloc (it slows allocations), then traced."""
    data = case.build()
    decode = decoder(case.kind)
    started = time.perf_counter()
    error, message = _outcome(decode, data)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    _outcome(decode, data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Outcome(case.name, case.kind, case.declares, len(data), error, len(message), peak,
                   round(seconds, 4))


def _outcome(decode: Callable[[bytes], Any], data: bytes) -> tuple[str, str]:
    try:
        decode(data)
    except Exception as exc:  # the outcome names whatever was raised
        return type(exc).__name__, str(exc)
    return "", ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.crafted")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--case", action="append", help="only these cases (repeatable)")
    args = parser.parse_args(argv)
    chosen = [case for case in CASES if not args.case or case.name in args.case]
    outcomes = [measure(case) for case in chosen]
    if args.json:
        print(json.dumps([asdict(outcome) for outcome in outcomes]))
        return 0
    print(f"{'case':<32} {'file':>9} {'declares':<36} {'error':<26} {'msg':>5} "
          f"{'peak MiB':>9} {'seconds':>8}")
    for o in outcomes:
        print(f"{o.name:<32} {o.file_bytes:>9} {o.declares:<36} {o.error:<26} "
              f"{o.message_chars:>5} {o.peak_bytes / MIB:>9.2f} {o.seconds:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
