"""The machine a result was measured on, recorded next to every result."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("pyspark-dstl", "rocksdict", "aiobotocore", "moto", "msgpack", "zstandard",
            "tenacity", "pyspark", "pandas", "pyarrow", "numpy", "grpcio", "protobuf",
            "matplotlib", "pyinstrument")


def machine_info() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gb": _memory_gb(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "git_commit": _git_commit(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _java_version() -> str | None:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",  # docs aside
                            "--untracked-files=no", "--", ".", ":(exclude)docs"],
                           capture_output=True, text=True, timeout=10, check=False)
    commit = done.stdout.strip() or None
    if commit and dirty.stdout.strip():
        commit += " (with uncommitted changes)"
    return commit
