"""What every benchmark script shares: its command line, statistics, tables and the JSON record.

Numbers are only comparable when measured side by side in one run, so a script builds one
Report, prints each table as it is measured and writes everything (with the machine and the
exact command) to benchmarks/results/<name>.json at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import machine_info

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
IMG_DIR = REPO_ROOT / "docs" / "img"
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}


def parse_args(description: str, argv: Sequence[str] | None = None,
               extra: Sequence[tuple[Sequence[str], dict[str, Any]]] = ()) -> argparse.Namespace:
    """The options every script takes, plus its own (`extra`: add_argument args, kwargs)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="a small configuration that runs in under a minute (smoke test)")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR),
                        help="where <name>.json goes (default: benchmarks/results)")
    parser.add_argument("--img-dir", default=str(IMG_DIR),
                        help="where <name>.png goes (default: docs/img)")
    parser.add_argument("--work-dir", default=None,
                        help="scratch directory (default: a fresh one under the system temp)")
    parser.add_argument("--seed", type=int, default=7, help="seed of every random choice")
    parser.add_argument("--profile", default=None, metavar="HTML",
                        help="profile the run with pyinstrument and write an HTML report here")
    for args, kwargs in extra:
        parser.add_argument(*args, **kwargs)
    return parser.parse_args(argv)


def plan_of(args: argparse.Namespace, quick: Mapping[str, Any], full: Mapping[str, Any],
            overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The quick or the full plan, with each option named in `overrides` (the plan key and
    the option's dest alike) in its place when the command line gave it a value that is not
    zero or empty."""
    plan = dict(quick if args.quick else full)
    for name in overrides:
        value = getattr(args, name)
        if value:
            plan[name] = value
    return plan


def chosen_modes(text: str, known: Mapping[str, str]) -> list[str]:
    """The comma-separated modes of `text`, each one of `known`; exits naming any other."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in known]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {list(known)}")
    return modes


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Count, mean, min, max and percentiles (linear interpolation, as numpy does)."""
    if not values:
        return {"n": 0}
    array = np.asarray(values, dtype=np.float64)
    result: dict[str, float] = {"n": int(array.size), "mean": float(array.mean()),
                                "min": float(array.min()), "max": float(array.max())}
    for label, q in PERCENTILES.items():
        result[label] = float(np.percentile(array, q))
    return result


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is zero (printed as n/a)."""
    return numerator / denominator if denominator else math.nan


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:  # NaN comes back from the JSON files as null
        return "n/a"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if value != 0 and abs(value) < 10 ** -digits:
            return f"{value:.{digits}g}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:,.{digits}f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[fmt(value) for value in row] for row in rows]
    widths = [max(len(str(h)), *(len(row[i]) for row in cells)) if cells else len(str(h))
              for i, h in enumerate(headers)]
    lines = [title, "  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


class Report:
    """The record of one run: configuration, machine, tables, goals; saved as one JSON file."""

    def __init__(self, name: str, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.name = name
        self.args = args
        self.started = time.time()
        self.data: dict[str, Any] = {
            "benchmark": name,
            "command": command_line(),
            "quick": bool(args.quick),
            "seed": args.seed,
            "config": config,
            "machine": machine_info(),
            "tables": [],
            "goals": [],
            "notes": [],
        }
        print(f"# {name}: {json.dumps(config, default=str)}", flush=True)

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        print("\n" + render_table(title, headers, rows), flush=True)
        self.data["tables"].append({"title": title, "headers": list(headers),
                                    "rows": [list(row) for row in rows]})

    def put(self, key: str, value: Any) -> None:
        """Raw measurements kept in the JSON (samples, per-step series) for later plots."""
        self.data[key] = value

    def note(self, text: str) -> None:
        print(f"note: {text}", flush=True)
        self.data["notes"].append(text)

    def goal(self, name: str, goal: str, measured: str, value: float, met: bool) -> None:
        """One line of the summary: what was asked, what was measured, the ratio, met or not."""
        self.data["goals"].append({"benchmark": name, "goal": goal, "measured": measured,
                                   "ratio": value, "met": bool(met)})

    def save(self) -> Path:
        self.data["elapsed_seconds"] = round(time.time() - self.started, 1)
        self.data["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.data["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        for goal in self.data["goals"]:
            print(f"goal  {goal['benchmark']}: {goal['goal']} | measured {goal['measured']} | "
                  f"ratio {fmt(goal['ratio'])} | {'met' if goal['met'] else 'MISSED'}")
        out_dir = Path(self.args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(_clean(self.data), indent=1, sort_keys=False,
                                        default=str) + "\n")
        os.replace(temporary, path)
        print(f"\nwrote {_shown(path)} ({self.data['elapsed_seconds']} s)", flush=True)
        return path

    def image_path(self, suffix: str = "") -> Path:
        img_dir = Path(self.args.img_dir)
        img_dir.mkdir(parents=True, exist_ok=True)
        return img_dir / f"{self.name}{suffix}.png"


def command_line() -> str:
    """The command as a user would type it from the repository root."""
    module = Path(sys.argv[0]).stem if sys.argv else "?"
    args = " ".join(shlex.quote(a) for a in sys.argv[1:])
    return f"python -m benchmarks.{module} {args}".strip()


POOL_VARIABLE = "PYSPARK_DSTL_BENCH_WORKERS"


@contextmanager
def own_python_workers(spark: Any, contender: str) -> Iterator[None]:
    """Python functions defined inside run in Python workers of `contender` alone.

    Spark keeps one pool of Python workers per environment of the functions it runs, and a
    function takes SparkContext.environment as it is when the function is defined: tagging
    it gives each contender workers of its own for its warm-up and its measured runs. Without
    that, Spark's own operators would run in workers whose objects this library's tasks froze
    (spark/stage/worker_heap.py) and skip the full collections their users pay after every
    task."""
    environment = spark.sparkContext.environment
    before = environment.get(POOL_VARIABLE)
    environment[POOL_VARIABLE] = contender
    try:
        yield
    finally:
        if before is None:
            environment.pop(POOL_VARIABLE, None)
        else:
            environment[POOL_VARIABLE] = before


@contextmanager
def scratch(args: argparse.Namespace, label: str) -> Iterator[Path]:
    """A scratch directory for one configuration, removed afterwards."""
    base = Path(args.work_dir) if args.work_dir else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"dstl-bench-{label}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def profiled(args: argparse.Namespace) -> Iterator[None]:
    """Profile the body with pyinstrument when --profile is given (wall clock, all threads)."""
    if not args.profile:
        yield
        return
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        Path(args.profile).write_text(profiler.output_html())
        print(profiler.output_text(unicode=False, color=False, show_all=False)[:6000])
        print(f"profile written to {args.profile}")


def dir_size(path: Path) -> int:
    """Bytes of every regular file under `path` (what a file:// checkpoint occupies)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed by a cleanup while we walked
                continue
    return total


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _clean(value: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
