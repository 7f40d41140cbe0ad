"""`import pyspark_dstl` stays light: it loads the facade and the error root, nothing heavy,
and takes well under 0.15 s; a name of the facade loads only the room that defines it.

How the time is held on a loaded machine: the modules it may load are checked exactly (that
is the guarantee and it cannot flake); the time is Python's own `-X importtime` figure for the
package (its cumulative microseconds, interpreter start-up left out), the minimum of several
fresh interpreters. Other processes can only add time to a run, never take it away, so the
minimum is the run closest to the real cost, and a bound on it does not fail because the
machine was busy for one or two of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("rocksdict", "numpy", "fsspec", "zstandard", "pyspark", "pandas", "pyarrow",
         "msgpack", "aiobotocore", "botocore", "aiohttp", "tenacity", "google_crc32c")
LIGHT_MODULES = {"pyspark_dstl", "pyspark_dstl.core", "pyspark_dstl.core.errors",
                 "pyspark_dstl.core.lazy_names"}
BOUND_SECONDS = 0.15
RUNS = 5


def loaded_after(code: str, cwd: Path) -> list[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                         text=True, check=True)
    return list(json.loads(out.stdout))


def heavy_in(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_importing_the_package_loads_only_its_facade_and_error_root(tmp_path: Path) -> None:
    modules = loaded_after("import pyspark_dstl", tmp_path)
    assert heavy_in(modules) == []
    assert {m for m in modules if m.startswith("pyspark_dstl")} == LIGHT_MODULES


def test_an_error_or_warning_root_named_through_the_facade_loads_nothing_heavy(
        tmp_path: Path) -> None:
    names = ["ChangelogError", "MaterializerError", "BackendError", "DstlSparkError",
             "FencedError", "CheckpointHeldError", "SchemaRecordError", "StatefulTaskError",
             "DstlWarning", "NonAtomicStorageWarning", "StaleInstallWarning"]
    modules = loaded_after("import pyspark_dstl\n"
                           + "\n".join(f"pyspark_dstl.{name}" for name in names), tmp_path)
    assert heavy_in(modules) == []


def test_each_room_imports_without_loading_its_modules(tmp_path: Path) -> None:
    rooms = ["pyspark_dstl.changelog", "pyspark_dstl.materializer", "pyspark_dstl.backend",
             "pyspark_dstl.spark"]
    modules = loaded_after("\n".join(f"import {room}" for room in rooms), tmp_path)
    assert heavy_in(modules) == []
    assert {m for m in modules if m.startswith("pyspark_dstl")} == LIGHT_MODULES | set(rooms)


def own_import_seconds(cwd: Path) -> float:
    """The package's cumulative import time as `python -X importtime` reports it."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pyspark_dstl"],
                         cwd=cwd, capture_output=True, text=True, check=True)
    for line in out.stderr.splitlines():
        fields = [field.strip() for field in line.removeprefix("import time:").split("|")]
        if len(fields) == 3 and fields[2] == "pyspark_dstl":
            return int(fields[1]) / 1e6
    raise AssertionError(f"no import time line for pyspark_dstl in:\n{out.stderr}")


def test_importing_the_package_takes_under_its_bound(tmp_path: Path) -> None:
    fastest = min(own_import_seconds(tmp_path) for _ in range(RUNS))
    assert fastest < BOUND_SECONDS, f"import pyspark_dstl took {fastest:.3f} s at best"
