"""Where one task of the per-key keyed count spends its time per key, measured without Spark.

Benchmark 6's per-key variants (benchmarks/spark_jobs.py: PerKeyCount, and the PySpark
processors TwsCount and TwsCountRows as the switch runs them) run, per partition and batch, the
task runner (spark/stage/runner.py run_processor) over one partition's rows. This drives that
runner alone on the backend's RocksDB store on file://: a store holding `store_keys` counts,
then batches of `rows` rows over `batch_keys` keys drawn from the stored ones (a few rows per
key, every key with a stored value), committed one after the other. Each batch runs on the same
committed version once per variant as is (the total per key; thread CPU time is the figure to
compare on a busy machine), then the per-key API once more with the runner's steps wrapped by
timers (the split; the wrapping adds its own cost, so the split's parts are compared with each
other), and the switch's pandas path once more under pyinstrument (the profile, by what its
frames do). The PySpark processor's own output frame (one pd.DataFrame of one row per key) is
timed alone as well: that part is the processor's, whatever runs it. Every output is checked
against a model of the counts.

    python -m benchmarks.perkey_task [--quick] [--rounds 5] [--profile out.html]
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.harness import Report, parse_args, plan_of, profiled, scratch
from benchmarks.pyspark_path import REST, profile_split, pyspark_adapter
from benchmarks.spark_jobs import PerKeyCount, TwsCount, TwsCountRows, VectorizedCount
from benchmarks.step_clock import StepClock
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.backend.store.state_store import ChangelogStateStore
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping, with_group_column
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.processors.processor import StatefulProcessor
from pyspark_dstl.spark.processors.state_variables import ValueState
from pyspark_dstl.spark.pyspark_api.pyspark_rows import PANDAS, ROWS
from pyspark_dstl.spark.stage.output import OutputCollector
from pyspark_dstl.spark.stage.runner import BatchTimes, run_processor

NAME = "perkey_task"
FULL: dict[str, Any] = {"store_keys": 250_000, "rows": 50_000, "batch_keys": 12_500,
                        "rounds": 5}
QUICK: dict[str, Any] = {"store_keys": 5_000, "rows": 1_000, "batch_keys": 250, "rounds": 2}
PROCESSOR_STEP_GOAL_US = 100.0  # the switch's pandas path, CPU per key, a few rows per key
OUTPUT = pa.schema([("user", pa.string()), ("count", pa.int64())])
KEY_COLUMNS = ("user",)
GROUPING = KeyGrouping(("string",), KEY_GROUPS)
# (label, owner, attribute) of each wrapped step, in the order a batch reaches them
PHASES: tuple[tuple[str, Any, str], ...] = (
    ("grouping + key tuples + key bytes", KeyedBatch, "__init__"),
    ("pandas frame of the batch (once)", KeyedBatch, "frame"),
    ("rows handed to the processor", StatefulProcessor, "rows_by_key"),
    ("bulk state read of the batch's keys (multi_get)", ChangelogStateStore, "multi_get"),
    ("value state get (without the bulk read)", ValueState, "get"),
    ("store put (transaction cache)", ChangelogStateStore, "put"),
    ("value state update (without the put)", ValueState, "update"),
    ("output collection (add)", OutputCollector, "add"),
    ("output to Arrow (finish)", OutputCollector, "finish"),
)
OTHER = "other (runner loop, processor's own code)"
NATIVE = (("vectorized", VectorizedCount), ("per_key", PerKeyCount))
SWITCHED = (("pyspark pandas", lambda: pyspark_adapter(TwsCount(), PANDAS, ("user", "count"))),
            ("pyspark rows", lambda: pyspark_adapter(TwsCountRows(), ROWS, ("user", "count"))))
OWN_FRAME = "pyspark pandas: the processor's output frame alone"
LABELS = {"vectorized": "vectorized API", "per_key": "per-key API",
          "pyspark pandas": "the switch: transformWithStateInPandas processor",
          "pyspark rows": "the switch: transformWithState processor (Rows)",
          OWN_FRAME: "its output frame alone (pd.DataFrame of one row per key)"}


class PhaseClock(StepClock):
    """Adds up the wall time spent in the wrapped steps while `installed`; a step called
    inside another (the batch's frame, built by the first slice) counts for itself alone."""

    def __init__(self) -> None:
        super().__init__(PHASES)
        self._nested = [0.0]  # time of wrapped steps inside the step running now

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        seconds = self.seconds
        nested = self._nested
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer = nested[0]
            nested[0] = 0.0
            began = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent = clock() - began
                seconds[label] += spent - nested[0]
                nested[0] = outer + spent

        return timed

    def replacement(self, label: str, owner: Any, attribute: str, original: Any) -> Any:
        """A cached property's function is timed inside a cached property; rows_by_key's
        per-key callable is timed as well as its own call."""
        if isinstance(original, cached_property):
            replacement = cached_property(self.wrap(label, original.func))
            replacement.__set_name__(owner, attribute)
            return replacement
        if attribute == "rows_by_key":
            wrap = self.wrap

            def rows_by_key(*args: Any, **kwargs: Any) -> Any:
                return wrap(label, wrap(label, original)(*args, **kwargs))

            return rows_by_key
        return self.wrap(label, original)


def with_groups(table: pa.Table) -> pa.Table:
    """The rows as the stage hands them to a task: with Spark's key group column (computed
    here, before any timing)."""
    return with_group_column(table, KEY_COLUMNS, GROUPING)


def user_names(indices: np.ndarray) -> pa.Array:
    return pa.array([f"user-{int(i)}" for i in indices], pa.string())


def measure(plan: dict[str, Any], work: Path, seed: int) -> dict[str, Any]:
    """Per round: plain seconds of each variant, the wrapped split, the profile, keys, rows."""
    rng = np.random.default_rng(seed)
    store_keys = plan["store_keys"]
    counts = np.ones(store_keys, dtype=np.int64)
    backend = StateBackend(BackendSettings.from_mapping(
        {"spark.dstl.stateStore.localDir": str(work / "local")}))
    rounds: list[dict[str, Any]] = []
    try:
        # this library's own values and the switch's (with a schema id) in stores of their own
        providers = [backend.provider((work / "checkpoint").as_uri(), "perkey", partition)
                     for partition in (0, 1)]
        everyone = with_groups(pa.table({"user": user_names(np.arange(store_keys)),
                                         "v": pa.array(np.zeros(store_keys, dtype=np.int64))}))
        infos = []
        for provider, first in zip(providers, (VectorizedCount(), SWITCHED[0][1]()),
                                   strict=True):
            store = provider.get_store(0)
            _run(first, store, everyone, 0)
            infos.append(store.commit())
        clock = PhaseClock()
        for batch_id in range(1, plan["rounds"] + 1):
            chosen = rng.choice(store_keys, plan["batch_keys"], replace=False)
            users = chosen[rng.integers(0, len(chosen), plan["rows"])]
            table = with_groups(pa.table({"user": user_names(users),
                                          "v": pa.array(np.arange(plan["rows"],
                                                                  dtype=np.int64))}))
            after = counts.copy()
            np.add.at(after, users, 1)
            distinct = np.unique(users)
            expected = (len(distinct), int(after[distinct].sum()))
            sample: dict[str, Any] = {"keys": len(distinct), "rows": plan["rows"]}
            for (provider, info), variants in zip(zip(providers, infos, strict=True),
                                                  (NATIVE, SWITCHED), strict=True):
                for label, make in variants:
                    store = provider.get_store(info.version, info)
                    began, began_cpu = time.perf_counter(), time.thread_time()
                    output = _run(make(), store, table, batch_id)
                    sample[label] = time.perf_counter() - began
                    sample[label + " cpu"] = time.thread_time() - began_cpu
                    store.abort()
                    _check(output, expected, f"{label} batch {batch_id}")
            sample[OWN_FRAME], sample[OWN_FRAME + " cpu"] = own_frames(distinct)
            store = providers[0].get_store(infos[0].version, infos[0])
            with clock.installed():
                began = time.perf_counter()
                output = _run(PerKeyCount(), store, table, batch_id)
                sample["per_key wrapped"] = time.perf_counter() - began
            sample["split"] = clock.take()
            began = time.perf_counter()
            infos[0] = store.commit()
            sample["commit"] = time.perf_counter() - began
            _check(output, expected, f"wrapped per_key batch {batch_id}")
            store = providers[1].get_store(infos[1].version, infos[1])
            output, sample["profile"], sample["profiled"] = profile_split(
                functools.partial(_run, SWITCHED[0][1](), store, table, batch_id))
            infos[1] = store.commit()
            _check(output, expected, f"profiled pyspark pandas batch {batch_id}")
            counts = after
            rounds.append(sample)
    finally:
        backend.close()
    return {"rounds": rounds}


def own_frames(users: np.ndarray) -> tuple[float, float]:
    """(wall, CPU) seconds of what TwsCount builds per key by itself: one pd.DataFrame of one
    row, for every key of the batch."""
    names = [f"user-{int(u)}" for u in users]
    began, began_cpu = time.perf_counter(), time.thread_time()
    for count, name in enumerate(names):
        pd.DataFrame({"user": [name], "count": [count]})
    return time.perf_counter() - began, time.thread_time() - began_cpu


def _run(processor: Any, store: Any, table: pa.Table, batch_id: int) -> pa.Table:
    result = run_processor(processor, store, table, KEY_COLUMNS, OUTPUT, batch_id=batch_id,
                           partition_id=0, times=BatchTimes(int(time.time() * 1000)),
                           grouping=GROUPING)
    output: pa.Table = result.output
    return output


def _check(output: pa.Table, expected: tuple[int, int], what: str) -> None:
    got = (output.num_rows, int(output.column("count").to_numpy().sum()))
    if got != expected:
        raise RuntimeError(f"{what}: output (rows, sum of counts) {got}, expected {expected}")


def per_key_us(seconds: float, keys: int) -> float:
    return seconds / keys * 1e6 if keys else float("nan")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--rounds"], {"type": int, "default": None, "help": "batches measured"}),
        (["--store-keys"], {"type": int, "default": None}),
        (["--rows"], {"type": int, "default": None, "help": "rows per batch"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("rounds", "store_keys", "rows"))
    report = Report(NAME, args, {**plan, "processors": "benchmarks.spark_jobs PerKeyCount, "
                                                       "VectorizedCount, TwsCount, "
                                                       "TwsCountRows", "store": "rocksdb"})
    with scratch(args, "perkey") as work, profiled(args):
        measured = measure(plan, work, args.seed)
    rounds = measured["rounds"]
    report.put("rounds", rounds)
    keys = sum(r["keys"] for r in rounds)
    rows = sum(r["rows"] for r in rounds)
    variants = [*(label for label, _ in NATIVE), *(label for label, _ in SWITCHED), OWN_FRAME]
    plain = {label: sum(r[label] for r in rounds) for label in variants}
    cpu = {label: sum(r[label + " cpu"] for r in rounds) for label in plain}
    report.table(f"Plain runs: {len(rounds)} batches of {rows // len(rounds):,} rows, "
                 f"{keys / len(rounds):,.0f} distinct keys each ({rows / keys:.1f} rows per "
                 f"key), store of {plan['store_keys']:,} keys",
                 ["variant", "us per key", "CPU us per key", "keys per second"],
                 [[LABELS[label], per_key_us(seconds, keys), per_key_us(cpu[label], keys),
                   keys / seconds if seconds else 0.0] for label, seconds in plain.items()])
    step = per_key_us(cpu["pyspark pandas"], keys)
    report.goal("the switch's processor step per key (pandas API, a few rows per key)",
                f"<= {PROCESSOR_STEP_GOAL_US:g} us of CPU per key",
                f"{step:.0f} us per key, of which {per_key_us(cpu[OWN_FRAME], keys):.0f} us "
                f"the processor's own output frame", step / PROCESSOR_STEP_GOAL_US,
                step <= PROCESSOR_STEP_GOAL_US)
    split: dict[str, float] = defaultdict(float)
    for r in rounds:
        for label, seconds in r["split"].items():
            split[label] += seconds
    wrapped = sum(r["per_key wrapped"] for r in rounds)
    order = [label for label, _, _ in PHASES]
    rows_out = [[label, per_key_us(split.get(label, 0.0), keys),
                 split.get(label, 0.0) / wrapped if wrapped else 0.0] for label in order]
    rows_out.append([OTHER, per_key_us(wrapped - sum(split.values()), keys),
                     (wrapped - sum(split.values())) / wrapped if wrapped else 0.0])
    rows_out.append(["total (wrapped run)", per_key_us(wrapped, keys), 1.0])
    rows_out.append(["commit (flush, changelog; not in the run)",
                     per_key_us(sum(r["commit"] for r in rounds), keys), float("nan")])
    report.table("Per-key API split (steps wrapped by timers)",
                 ["step", "us per key", "share of the run"], rows_out)
    profile: dict[str, float] = defaultdict(float)
    for r in rounds:
        for label, seconds in r["profile"].items():
            profile[label] += seconds
    in_profile = sum(r["profiled"] for r in rounds)
    shown = sorted(profile, key=lambda label: (label == REST, -profile[label]))
    report.table("The switch's transformWithStateInPandas path, profiled (pyinstrument, wall "
                 "time of one more run of every batch, by what the profile's frames do)",
                 ["part", "us per key", "share of the run"],
                 [*([label, per_key_us(profile[label], keys),
                     profile[label] / in_profile if in_profile else 0.0] for label in shown),
                  ["total (profiled run)", per_key_us(in_profile, keys), 1.0]])
    report.put("us_per_key", {"plain": {k: per_key_us(v, keys) for k, v in plain.items()},
                              "plain_cpu": {k: per_key_us(v, keys) for k, v in cpu.items()},
                              "split": {label: row[1] for label, row in
                                        zip([*order, OTHER], rows_out, strict=False)},
                              "profile": {k: per_key_us(v, keys) for k, v in profile.items()}})
    report.save()


if __name__ == "__main__":
    main()
