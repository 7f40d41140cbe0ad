"""Manifest byte format, handle serialization, names and request validation."""

from __future__ import annotations

import struct

import msgpack
import pytest

from pyspark_dstl.materializer import (
    HandleFormatError,
    ManifestError,
    MaterializedHandle,
    SnapshotFile,
    SnapshotManifest,
    SnapshotRequest,
    SnapshotRequestError,
    decode_manifest,
    encode_manifest,
    referenced_files,
)
from pyspark_dstl.materializer.checksum import crc32_of
from pyspark_dstl.materializer.manifest import HEADER, MAGIC
from pyspark_dstl.materializer.names import manifest_name, parse_manifest_name


def make_manifest(version: int = 7, unique_id: str = "9f3c-attempt-1") -> SnapshotManifest:
    return SnapshotManifest(
        store_id="op/0/3",
        version=version,
        unique_id=unique_id,
        sqn=41,
        lineage=((5, "a1"), (6, "b2"), (7, unique_id)),
        files=(
            SnapshotFile("000012.sst", f"state/0/3/sst/000012-{version}.sst", 4096, 0xDEADBEEF),
            SnapshotFile("CURRENT", f"state/0/3/meta/CURRENT-{version}", 16, 7),
        ),
        column_families=("default", "timers"),
        key_counts={"default": 100, "timers": 3},
        rocksdb={"raw_mode": True},
        created_ms=1_700_000_000_000,
        metadata={"checkpoint_format": 2, "owner": b"\x00\x01"},
    )


def reheader(body: bytes, version: int = 1) -> bytes:
    return HEADER.pack(MAGIC, version, len(body), crc32_of(body)) + body


def test_manifest_round_trips_every_field() -> None:
    manifest = make_manifest()
    assert decode_manifest(encode_manifest(manifest)) == manifest


def test_manifest_starts_with_magic_version_length_and_crc() -> None:
    data = encode_manifest(make_manifest())
    magic, version, length, crc = struct.unpack(">8sHII", data[:18])
    assert (magic, version, length) == (b"DSTLSNAP", 1, len(data) - 18)
    assert crc == crc32_of(data[18:])


def test_manifest_with_bad_magic_is_rejected_naming_the_path() -> None:
    data = b"NOTSNAP!" + encode_manifest(make_manifest())[8:]
    with pytest.raises(ManifestError, match=r"magic.*'state/x/1_u\.snapshot'"):
        decode_manifest(data, "state/x/1_u.snapshot")


def test_manifest_of_unknown_version_is_rejected() -> None:
    body = encode_manifest(make_manifest())[HEADER.size:]
    with pytest.raises(ManifestError, match="unsupported manifest format version 2"):
        decode_manifest(reheader(body, version=2))


def test_manifest_with_altered_body_fails_crc() -> None:
    data = bytearray(encode_manifest(make_manifest()))
    data[-5] ^= 0x40
    with pytest.raises(ManifestError, match="CRC mismatch"):
        decode_manifest(bytes(data))


@pytest.mark.parametrize("keep", [0, 10, HEADER.size + 3])
def test_truncated_manifest_is_rejected(keep: int) -> None:
    with pytest.raises(ManifestError):
        decode_manifest(encode_manifest(make_manifest())[:keep])


@pytest.mark.parametrize("local_name", ["../CURRENT", "sub/000001.sst", "", ".."])
def test_manifest_with_unsafe_local_name_is_rejected(local_name: str) -> None:
    body = msgpack.unpackb(encode_manifest(make_manifest())[HEADER.size:], raw=False)
    body["files"][0][0] = local_name
    with pytest.raises(ManifestError, match="unsafe local file name"):
        decode_manifest(reheader(msgpack.packb(body, use_bin_type=True)))


def test_manifest_lacking_a_field_names_it() -> None:
    body = msgpack.unpackb(encode_manifest(make_manifest())[HEADER.size:], raw=False)
    del body["sqn"]
    with pytest.raises(ManifestError, match="'sqn'"):
        decode_manifest(reheader(msgpack.packb(body, use_bin_type=True)))


def test_referenced_files_unites_the_files_of_all_manifests() -> None:
    first, second = make_manifest(7), make_manifest(8)
    assert referenced_files([first, second]) == {
        f.dfs_path for f in first.files + second.files}


def test_manifest_names_parse_back_to_version_and_unique_id() -> None:
    assert parse_manifest_name(manifest_name(12, "a_b-c.d")) == (12, "a_b-c.d")
    assert parse_manifest_name("12_u.changelog") is None
    assert parse_manifest_name("x_u.snapshot") is None


def test_materialized_handle_round_trips_through_dict() -> None:
    handle = MaterializedHandle("op/0/3", 7, "u7", 41, "state/0/3/7_u7.snapshot", 10, 4, 6)
    data = handle.to_dict()
    assert data["format_version"] == 1
    assert MaterializedHandle.from_dict(data) == handle


def test_materialized_handle_of_unknown_format_is_rejected() -> None:
    data = MaterializedHandle("s", 1, "u", 1, "p", 1, 1, 1).to_dict() | {"format_version": 99}
    with pytest.raises(HandleFormatError, match="99"):
        MaterializedHandle.from_dict(data)


def test_materialized_handle_with_wrong_field_type_names_the_field() -> None:
    data = MaterializedHandle("s", 1, "u", 1, "p", 1, 1, 1).to_dict() | {"sqn": "1"}
    with pytest.raises(HandleFormatError, match="'sqn'"):
        MaterializedHandle.from_dict(data)


@pytest.mark.parametrize("unique_id", ["", "a/b", "-lead", "x" * 200, "with space"])
def test_request_rejects_unique_ids_unusable_in_file_names(unique_id: str) -> None:
    with pytest.raises(SnapshotRequestError, match="unique id"):
        SnapshotRequest("s", 1, unique_id, 0)


def test_request_rejects_metadata_msgpack_cannot_hold() -> None:
    with pytest.raises(SnapshotRequestError, match="metadata"):
        SnapshotRequest("s", 1, "u", 0, metadata={"when": object()})


def test_request_rejects_negative_version() -> None:
    with pytest.raises(SnapshotRequestError, match="version"):
        SnapshotRequest("s", -1, "u", 0)
