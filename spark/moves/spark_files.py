"""The files of the Spark checkpoint an export leaves (docs/formats.md, "The Spark checkpoint of
export-state"): assembled from the location's engine checkpoint (Spark's own logs of the query
that ran here) and from the staging checkpoint in which Spark's own operator wrote the state.

What is copied as Spark wrote it: `metadata` (the query id) and `sources/` from the engine
checkpoint; the state store's snapshot and SST files, the state schema file from the staging
checkpoint. What is written here, each in Spark's own format and read back by Spark in the
tests:

- `offsets/M-1` and `offsets/M`: the engine's entries without the tick source's offset (the
  query on Spark reads only its own sources); entry M with the batch's watermark and processing
  time as this backend committed them, and the session settings Spark pinned in the staging
  checkpoint (the state store provider, its encoding, the partition count);
- `commits/M`: the watermark of the next batch, as this backend committed it;
- `state/0/<partition>/<M+1>.zip`: the staging checkpoint's newest snapshot under the version
  batch M leaves (Spark names a state version after the batch that wrote it, plus one; the
  archive itself names no version);
- `state/0/_metadata/v2/M`: the staging checkpoint's newest operator metadata, its state schema
  file paths pointing into the new checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

OPERATOR = "0"  # the one stateful operator of the exported query
TICK_SOURCE_KEY = "tick"  # the tick source's offset JSON (time/ticks.py)


def log_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def is_tick_offset(line: str) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {TICK_SOURCE_KEY}


def query_offsets(lines: list[str]) -> list[str]:
    """The source offsets of an engine entry without the tick source's."""
    return [line for line in lines[2:] if not is_tick_offset(line)]


def write_new(path: Path, data: str | bytes) -> None:
    """Create `path` (its parents too); an existing file is an error (nothing is replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("xb") as file:
        file.write(data.encode() if isinstance(data, str) else data)


def copy_tree(source: Path, target: Path) -> None:
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        destination = target / file.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, destination)


def pinned_conf(staging: Path) -> dict[str, str]:
    """The settings Spark pinned in the staging checkpoint's first offset log entry."""
    metadata = json.loads(log_lines(staging / "offsets" / "0")[1])
    return {str(k): str(v) for k, v in dict(metadata.get("conf") or {}).items()}


def place_logs(engine: Path, target: Path, batch_id: int, conf: Mapping[str, str],
               watermark_ms: int, timestamp_ms: int, next_watermark_ms: int) -> None:
    """metadata, sources/, offsets/M-1 and M, commits/M (module docstring)."""
    shutil.copy2(engine / "metadata", target / "metadata")
    if (engine / "sources").is_dir():
        copy_tree(engine / "sources", target / "sources")
    previous = engine / "offsets" / str(batch_id - 1)
    if batch_id > 0 and previous.is_file():
        lines = log_lines(previous)
        write_new(target / "offsets" / str(batch_id - 1),
                  "\n".join([lines[0], lines[1], *query_offsets(lines)]))
    lines = log_lines(engine / "offsets" / str(batch_id))
    metadata = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": timestamp_ms,
                "conf": dict(conf)}
    write_new(target / "offsets" / str(batch_id),
              "\n".join([lines[0], json.dumps(metadata), *query_offsets(lines)]))
    write_new(target / "commits" / str(batch_id),
              "v1\n" + json.dumps({"nextBatchWatermarkMs": next_watermark_ms}))


def snapshot_files(zip_path: Path) -> list[str]:
    """The SST files (under SSTs/) a RocksDB state store snapshot names."""
    with zipfile.ZipFile(zip_path) as archive:
        text = archive.read("metadata").decode("utf-8")
    metadata = json.loads(text.splitlines()[1])
    return [str(f["dfsSstFileName"]) for f in metadata.get("sstFiles", [])]


def place_state(staging: Path, target: Path, partitions: Iterable[int], staged_version: int,
                version: int, operator: str = OPERATOR) -> None:
    """Each partition's snapshot of `staged_version` as `version`, with its SST files."""
    for partition in partitions:
        source = staging / "state" / operator / str(partition)
        destination = target / "state" / operator / str(partition)
        archive = source / f"{staged_version}.zip"
        if not archive.is_file():
            raise FileNotFoundError(f"{archive}: Spark's operator left no snapshot of state "
                                    f"version {staged_version} for partition {partition}")
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copy2(archive, destination / f"{version}.zip")
        for name in snapshot_files(archive):
            write_new(destination / "SSTs" / name, (source / "SSTs" / name).read_bytes())


def place_operator_metadata(staging: Path, target: Path, final: Path, staged_batch: int,
                            batch_id: int, operator: str = OPERATOR) -> None:
    """The operator metadata of `staged_batch` as batch `batch_id`'s, and the schema files
    it names, which it then names at `final` (where `target` will be once in place). An
    operator with metadata of version 1 (an aggregation, a deduplication: one `metadata` file
    and a `schema` file under its partition 0, neither naming a batch or a path) gets its files
    as Spark wrote them, so a query resuming it checks its state schema against them."""
    versioned = staging / "state" / operator / "_metadata" / "v2" / str(staged_batch)
    if not versioned.is_file():
        copy_new(staging / "state" / operator / "_metadata",
                 target / "state" / operator / "_metadata")
        for schema in sorted((staging / "state" / operator).glob("*/_metadata")):
            copy_new(schema, target / schema.relative_to(staging))  # the partition-0 schema
        return
    lines = log_lines(versioned)
    metadata: dict[str, Any] = json.loads(lines[1])
    for store in metadata.get("stateStoreInfo", []):
        moved = []
        for path in store.get("stateSchemaFilePaths", []):
            relative = _relative_to_state(str(path), operator)
            write_new(target / relative, (staging / relative).read_bytes())
            moved.append("file:" + os.path.join(str(final), relative))
        store["stateSchemaFilePaths"] = moved
    write_new(target / "state" / operator / "_metadata" / "v2" / str(batch_id),
              "\n".join([lines[0], json.dumps(metadata, separators=(",", ":"))]))


def copy_new(source: Path, target: Path) -> None:
    """Every file under `source` to the same place under `target`, Hadoop's .crc files left
    out; none may exist there."""
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        if not file.name.endswith(".crc"):
            write_new(target / file.relative_to(source), file.read_bytes())


def _relative_to_state(path: str, operator: str = OPERATOR) -> str:
    """`state/...` of a schema file's path (a Hadoop path or URL into the staging checkpoint)."""
    marker = f"/state/{operator}/"
    at = path.rfind(marker)
    if at < 0:
        raise ValueError(f"state schema file path {path!r} is not under state/{operator}/")
    return path[at + 1:]
