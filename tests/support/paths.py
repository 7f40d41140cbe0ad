"""Where the repository, the tests' fixture files, Spark's jars and the tests' JVM cache are."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# what the tests make once per machine for their JVMs (tests/support/jvm_archive.py,
# tests/support/local_file_system.py)
JVM_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pyspark-dstl" / "jvm"


def spark_jars() -> Path:
    """The jars of the installed pyspark (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return Path(spec.origin).parent / "jars"


def make_cached(path: Path, make: Callable[[Path], None], what: str) -> None:
    """Make `path` in the JVM cache unless it is there, saying which it was."""
    if path.is_file():
        print(f"{what}: {path} (made before)")
        return
    make(path)
    print(f"{what}: {path} made ({path.stat().st_size // 2**10} KiB)")
