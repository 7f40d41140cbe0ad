"""Corrupt one checkpoint file at a time and check that both readers notice and name it.

A checkpoint is built with the workload (a forced snapshot at batch 5, changelogs after it),
so the newest commit needs every file type: its commit log entry, changelog files, a snapshot
manifest and the SST files the manifest names. Each case damages one of those files in place,
then asks
- `python -m pyspark_dstl verify` (in-process): must report a problem naming the file;
- a fresh backend on another host directory: loading the newest commit must fail with an
  error naming the file, or, when the damaged bytes are ones the load never reads, give
  exactly the model's state. A different state is the one outcome that is never allowed.
and puts the original bytes back.

    python -m tests.reliability.corruption --flips 200
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage import commit_entry
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.changelog import format as changelog_format
from pyspark_dstl.materializer import manifest as manifest_format
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.reliability.model import WorkloadSpec
from tests.reliability.soak import verify_root
from tests.reliability.workload import LIBRARY_ERRORS, StateMismatchError, Workload
from tests.support import S3Env

FILE_KINDS = ("commit_log", "changelog", "manifest", "sst")
DAMAGES = ("bit_flip", "truncate", "empty", "wrong_magic", "future_version")
LAST_BATCH = 7
FORCED_SNAPSHOT_EVERY = 5
SPEC = WorkloadSpec(seed=31, partitions=2)
Corrupt = Callable[[bytes, random.Random], bytes]


@dataclass(frozen=True)
class Targets:
    """The file of each kind that the newest commit needs (root-relative paths)."""

    paths: dict[str, str]


@dataclass(frozen=True)
class CaseResult:
    kind: str
    damage: str
    path: str
    verify_named_it: bool
    load: str  # "detected", "unaffected", "WRONG STATE" or "error without the file name"
    message: str


class Root:
    """A checkpoint root the test can read and damage behind the library's back."""

    def __init__(self, url: str, file_root: Path | None = None, s3: S3Env | None = None,
                 options: BackendSettings | None = None) -> None:
        self.url = url
        self.file_root = file_root
        self.s3 = s3
        self.options = options or BackendSettings()

    @classmethod
    def on_files(cls, root: Path) -> Root:
        return cls(root.as_uri(), file_root=root)

    @classmethod
    def on_s3(cls, s3: S3Env) -> Root:
        changelog = s3.options.with_changes(persist_delay=0.0)
        return cls(s3.url, s3=s3, options=BackendSettings(changelog=changelog))

    def read(self, path: str) -> bytes:
        if self.s3 is not None:
            data = self.s3.direct_get(path)
            assert data is not None, f"{path} is missing"
            return data
        assert self.file_root is not None
        return (self.file_root / path).read_bytes()

    def write(self, path: str, data: bytes) -> None:
        """Overwrite in place (the library itself never does)."""
        if self.s3 is not None:
            self.s3.direct_put(path, data)
            return
        assert self.file_root is not None
        file = self.file_root / path
        os.chmod(file, 0o644)
        file.write_bytes(data)

    def verify(self) -> list[str]:
        return verify_root(self.url, self.s3)

    def workload(self, local_dir: Path, **kwargs: Any) -> Workload:
        options = self.options.with_changes(
            local_dir=str(local_dir),
            materialization=MaterializerSettings(interval=None, every_n_commits=None))
        return Workload(SPEC, self.url, options, **kwargs)


def build_checkpoint(root: Root, local_dir: Path) -> Targets:
    workload = root.workload(local_dir, rng=random.Random(1),
                             force_snapshot_every=FORCED_SNAPSHOT_EVERY)
    try:
        workload.recover()
        workload.run(LAST_BATCH)
        storage = workload.backend.context(root.url).storage
        generations = CommitLog(storage).generations()[LAST_BATCH]
        latest = CommitLog(storage).read(LAST_BATCH)
    finally:
        workload.close()
    info = latest.operators[SPEC.operator].stores[0]
    assert info.materialized is not None, "the forced snapshot should be in the newest commit"
    manifest = manifest_format.decode_manifest(root.read(info.materialized.manifest_path))
    sst = max((f for f in manifest.files if f.dfs_path.endswith(".sst")), key=lambda f: f.size)
    return Targets({
        "commit_log": generations[-1][1].path,
        "changelog": info.changelog.paths[-1],
        "manifest": info.materialized.manifest_path,
        "sst": sst.dfs_path,
    })


# --- damages ---------------------------------------------------------------------------------


def bit_flip(data: bytes, rng: random.Random) -> bytes:
    offset = rng.randrange(len(data))
    damaged = bytearray(data)
    damaged[offset] ^= 1 << rng.randrange(8)
    return bytes(damaged)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(1, len(data))]


def empty(data: bytes, rng: random.Random) -> bytes:
    return b""


def wrong_magic(kind: str) -> Corrupt:
    def damage(data: bytes, rng: random.Random) -> bytes:
        if kind == "commit_log":
            document = json.loads(data)
            document["magic"] = "NOT-A-COMMIT"
            return json.dumps(document, sort_keys=True, indent=1).encode()
        if kind == "sst":  # RocksDB's table magic number closes the footer
            return data[:-8] + b"\x00" * 8
        return b"NOTDSTL!" + data[8:]

    return damage


def future_version(kind: str) -> Corrupt:
    """Otherwise intact bytes that claim the format version after this release's newest."""
    def damage(data: bytes, rng: random.Random) -> bytes:
        if kind == "commit_log":
            document = json.loads(data)
            document["format_version"] = commit_entry.FORMAT_VERSION + 1
            return json.dumps(document, sort_keys=True, indent=1).encode()
        if kind == "changelog":
            return data[:8] + struct.pack(">H", changelog_format.FORMAT_VERSION + 1) + data[10:]
        if kind == "manifest":
            return data[:8] + struct.pack(">H", manifest_format.FORMAT_VERSION + 1) + data[10:]
        raise ValueError("SST files are RocksDB's format: no version of ours to change")

    return damage


def damage_of(kind: str, damage: str) -> Corrupt:
    simple: dict[str, Corrupt] = {"bit_flip": bit_flip, "truncate": truncate, "empty": empty}
    if damage in simple:
        return simple[damage]
    return wrong_magic(kind) if damage == "wrong_magic" else future_version(kind)


def applicable(kind: str, damage: str) -> bool:
    return not (kind == "sst" and damage == "future_version")


# --- one case --------------------------------------------------------------------------------


@contextmanager
def damaged(root: Root, path: str, corrupt: Corrupt, rng: random.Random) -> Iterator[None]:
    original = root.read(path)
    changed = corrupt(original, rng)
    if changed == original:
        raise ValueError(f"the damage left {path} unchanged")
    root.write(path, changed)
    try:
        yield
    finally:
        root.write(path, original)


def load_outcome(root: Root, host: Path, path: str) -> tuple[str, str]:
    """Load the newest commit on a fresh host; how it went, and the error message."""
    shutil.rmtree(host, ignore_errors=True)
    workload = root.workload(host, rng=random.Random(0))
    try:
        workload.recover()
    except StateMismatchError as exc:
        return "WRONG STATE", str(exc)
    except LIBRARY_ERRORS as exc:
        message = _chain(exc)
        named = os.path.basename(path) in message
        return ("detected" if named else "error without the file name"), message
    finally:
        workload.close()
    return "unaffected", ""


def run_case(root: Root, host: Path, targets: Targets, kind: str, damage: str,
             rng: random.Random) -> CaseResult:
    path = targets.paths[kind]
    with damaged(root, path, damage_of(kind, damage), rng):
        problems = root.verify()
        outcome, message = load_outcome(root, host, path)
    named = any(path in problem for problem in problems)
    return CaseResult(kind, damage, path, named, outcome, message[:300])


def _chain(exc: BaseException) -> str:
    """The messages of an error and its causes: the file may be named one level down."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


def run_all(workdir: Path, flips: int, seed: int) -> list[CaseResult]:
    root = Root.on_files(workdir / "ckpt")
    targets = build_checkpoint(root, workdir / "writer")
    rng = random.Random(seed)
    results = []
    for kind in FILE_KINDS:
        for damage in DAMAGES:
            if not applicable(kind, damage):
                continue
            repeats = flips if damage in ("bit_flip", "truncate") else 1
            for _ in range(repeats):
                results.append(run_case(root, workdir / "reader", targets, kind, damage, rng))
    return results


def summarize(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = {}
    for result in results:
        row = table.setdefault(f"{result.kind}/{result.damage}", Counter())
        row["cases"] += 1
        row["verify_named_it"] += result.verify_named_it
        row[f"load_{result.load}"] += 1
    return {name: dict(row) for name, row in table.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.corruption")
    parser.add_argument("--flips", type=int, default=200,
                        help="random bit flips (and truncations) per file kind")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dstl-corruption-"))
    results = run_all(workdir, args.flips, args.seed)
    summary = summarize(results)
    print(json.dumps(summary, indent=1))
    bad = [r for r in results if not r.verify_named_it or r.load not in ("detected",
                                                                          "unaffected")]
    print(f"{len(results)} corruptions, verify named {sum(r.verify_named_it for r in results)}, "
          f"loads detected {sum(r.load == 'detected' for r in results)}, loads unaffected "
          f"{sum(r.load == 'unaffected' for r in results)}, bad {len(bad)}")
    for result in bad[:20]:
        print(f"  BAD {result}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
