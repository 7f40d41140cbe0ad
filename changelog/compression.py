"""Frame codecs of the changelog file format: ids on disk, compress and decompress.

Each frame is compressed on its own so that a ranged read of one segment decodes without the
rest of the file. A frame whose compressed form is not smaller than its raw form is stored raw,
and says so in its own codec byte.
"""

from __future__ import annotations

import threading

import zstandard

from pyspark_dstl.changelog.changelog_errors import FormatError
from pyspark_dstl.core.errors import excerpt

MAX_EXPANSION = 256
"""A zstd frame may declare at most this many times its compressed size: decoding a file then
costs at most a bounded multiple of its size, whatever it declares. A writer stores a record
that would compress better than that raw (codec 0) instead."""
CODEC_NONE = 0
CODEC_ZSTD = 1
CODEC_IDS: dict[str, int] = {"none": CODEC_NONE, "zstd": CODEC_ZSTD}
CODEC_NAMES: dict[int, str] = {ident: name for name, ident in CODEC_IDS.items()}

_local = threading.local()


def codec_id(name: str) -> int:
    """The on-disk id of a codec name; an unknown name is a FormatError naming it."""
    try:
        return CODEC_IDS[name]
    except KeyError:
        raise FormatError(f"unknown compression {name!r} "
                          f"(known: {', '.join(CODEC_IDS)})") from None


def codec_name(ident: int, path: str | None, offset: int) -> str:
    try:
        return CODEC_NAMES[ident]
    except KeyError:
        raise FormatError(f"unknown codec id {ident}", path, offset) from None


class FrameCompressor:
    """Compresses frame records with one codec; not shared between threads."""

    def __init__(self, name: str, level: int) -> None:
        self.codec = codec_id(name)
        if self.codec == CODEC_ZSTD and not 1 <= level <= 22:
            raise FormatError(f"zstd compression level must be between 1 and 22, got {level}")
        # The content size goes into every zstd frame so decompression knows the output size.
        self._zstd = (zstandard.ZstdCompressor(level=level, write_content_size=True)
                      if self.codec == CODEC_ZSTD else None)

    def compress(self, record: bytes) -> tuple[int, bytes]:
        """(codec id actually used, encoded bytes); raw when compression does not help."""
        if self._zstd is None:
            return CODEC_NONE, record
        packed = self._zstd.compress(record)
        if len(packed) >= len(record) or len(record) > MAX_EXPANSION * len(packed):
            return CODEC_NONE, record
        return CODEC_ZSTD, packed


def _decompressor() -> zstandard.ZstdDecompressor:
    # ZstdDecompressor objects must not be used by two threads at once: one per thread.
    found: zstandard.ZstdDecompressor | None = getattr(_local, "zstd", None)
    if found is None:
        found = zstandard.ZstdDecompressor()
        _local.zstd = found
    return found


def decompress(codec: int, payload: memoryview, limit: int, path: str | None,
               offset: int) -> bytes | memoryview:
    """Raw record bytes of a frame payload; `limit` caps the decompressed size."""
    if codec == CODEC_NONE:
        return payload
    if codec != CODEC_ZSTD:
        raise FormatError(f"unknown codec id {codec} in frame", path, offset)
    try:
        size = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise FormatError(f"bad zstd frame: {excerpt(exc)}", path, offset) from exc
    if size < 0:
        raise FormatError("zstd frame does not record its content size", path, offset)
    if size > limit:
        raise FormatError(f"zstd frame would expand to {size} bytes (limit {limit})",
                          path, offset)
    if size > MAX_EXPANSION * len(payload):
        raise FormatError(f"zstd frame of {len(payload)} bytes declares {size} bytes, more than "
                          f"{MAX_EXPANSION} times its size (writers store such records raw)",
                          path, offset)
    try:
        return _decompressor().decompress(payload)
    except zstandard.ZstdError as exc:
        raise FormatError(f"zstd frame cannot be decompressed: {excerpt(exc)}", path,
                          offset) from exc
