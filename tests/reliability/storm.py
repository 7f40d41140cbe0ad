"""Storage faults through the proxy: the workload commits while requests fail or stall.

A share of all requests (1% to 20%) fails, spread evenly over HTTP 500, 503 SlowDown, TCP
resets, attempts that time out and writes applied whose answer is lost; on top, a few requests
stall for a latency spike. The workload runs in-process with a short attempt timeout so a
stalled attempt is retried quickly. Afterwards a fresh backend, with the faults off, loads
every store at the last committed batch and compares it with the model, and `verify` reads
every file back.

    python -m tests.reliability.storm --batches 200 --levels 0.01,0.05,0.1,0.2
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.reliability.model import WorkloadSpec
from tests.reliability.workload import Workload
from tests.support import FaultProxy, FaultRule, MotoServer, RequestInfo, S3Env, make_s3_env
from tests.support.fault_proxy import FaultAction

FAULTS: tuple[tuple[FaultAction, int], ...] = (
    ("status", 500), ("status", 503), ("reset", 0), ("timeout", 0), ("lose_response", 0))
SPIKE_PROBABILITY = 0.02
SPIKE_SECONDS = 0.4
HELD_SECONDS = 5.0  # a "timeout" fault holds this long; the client gives up much earlier


@dataclass
class StormFigures:
    probability: float
    batches_committed: int = 0
    requests: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    spikes: int = 0
    failed_batches: int = 0
    recovered_batch: int = -1
    seconds: float = 0.0

    @property
    def faults_injected(self) -> int:
        return sum(self.faults.values())

    def as_dict(self) -> dict[str, Any]:
        return {"probability": self.probability, "batches_committed": self.batches_committed,
                "requests": self.requests, "faults_injected": self.faults_injected,
                "faults": dict(self.faults), "latency_spikes": self.spikes,
                "failed_batches_retried": self.failed_batches,
                "recovered_batch": self.recovered_batch, "seconds": round(self.seconds, 1)}


def fault_rules(probability: float) -> list[FaultRule]:
    """Rules whose first-match chances add up to `probability`, one share per fault kind."""
    share = probability / len(FAULTS)
    rules = []
    for index, (action, status) in enumerate(FAULTS):
        left = 1.0 - index * share  # the chance that no earlier rule fired
        rules.append(FaultRule(action, probability=min(1.0, share / left),
                               status=status or 503, delay=HELD_SECONDS))
    return rules


def storm_options(s3: S3Env, local_dir: Path) -> BackendSettings:
    changelog = s3.options.with_changes(persist_delay=0.0, attempt_timeout=0.5,
                                        backoff_initial=0.01, backoff_max=0.1, max_attempts=4)
    materialization = MaterializerSettings(interval=None, every_n_commits=3)
    return BackendSettings(local_dir=str(local_dir), changelog=changelog,
                          materialization=materialization, lock_timeout=5.0)


def run_storm(s3: S3Env, workdir: Path, probability: float, batches: int,
              seed: int) -> StormFigures:
    """Commit `batches` batches under faults, then recover and compare with faults off."""
    figures = StormFigures(probability)
    spec = WorkloadSpec(seed=seed, partitions=2)
    proxy = s3.proxy
    spikes = random.Random(seed)

    def latency(info: RequestInfo) -> float:
        if spikes.random() < SPIKE_PROBABILITY:
            figures.spikes += 1
            return SPIKE_SECONDS
        return 0.0

    events: list[dict[str, Any]] = []
    started = time.monotonic()
    proxy.reset()
    proxy.set_seed(seed)
    for rule in fault_rules(probability):
        proxy.add_rule(rule)
    proxy.set_latency_model(latency)
    workload = Workload(spec, s3.url, storm_options(s3, workdir / "host-a"), emit=events.append,
                        rng=random.Random(seed), cleanup_every=4, retain=2,
                        force_snapshot_every=9, max_failures=20)
    try:
        workload.recover()
        workload.run(batches - 1)
    finally:
        workload.close()
        proxy.clear_rules()
        proxy.set_latency_model(None)
        proxy.wait_idle(HELD_SECONDS + 5)
    log = proxy.log
    figures.requests = len(log)
    figures.faults.update(r.fault for r in log if r.fault)
    figures.batches_committed = sum(1 for e in events if e["event"] == "committed")
    figures.failed_batches = sum(1 for e in events if e["event"] == "batch_failed")
    checker = Workload(spec, s3.url, storm_options(s3, workdir / "host-b"),
                       rng=random.Random(seed + 1))
    try:
        figures.recovered_batch = checker.recover()
    finally:
        checker.close()
    figures.seconds = time.monotonic() - started
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.storm")
    parser.add_argument("--batches", type=int, default=200, help="batches per fault level")
    parser.add_argument("--levels", default="0.01,0.05,0.1,0.2",
                        help="shares of requests that fail, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dstl-storm-"))
    moto = MotoServer().start()
    proxy = FaultProxy(moto.endpoint_url).start()
    results = []
    try:
        for index, level in enumerate(float(x) for x in args.levels.split(",")):
            env = make_s3_env(moto, proxy)
            figures = run_storm(env, workdir / f"level-{index}", level, args.batches,
                                args.seed + index)
            results.append(figures.as_dict())
            print(json.dumps(figures.as_dict()), flush=True)
    finally:
        proxy.stop()
        moto.stop()
    print("level  batches  requests  faults  spikes  retried  recovered")
    for r in results:
        print(f"{r['probability']:>5.0%}  {r['batches_committed']:>7}  {r['requests']:>8}  "
              f"{r['faults_injected']:>6}  {r['latency_spikes']:>6}  "
              f"{r['failed_batches_retried']:>7}  {r['recovered_batch']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
