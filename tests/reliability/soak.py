"""The crash soak: hundreds of SIGKILLs on file:// and on the S3 API, with the counts printed.

    python -m tests.reliability.soak --kills 500 --seed 1

Half of the kills go to a file:// root, half to an S3 root (moto server behind the fault
proxy on 127.0.0.1). Kinds of death rotate: random moments, every library kill point, and on
S3 also requests held at the proxy before or after the server applied them. Every tenth round
is a second writer started while a run holds the root (it must be refused), every tenth a
zombie (a run paused until another took the root over, then resumed: it must stop without
writing); these come on top of the kills. Every tenth round is a rescale of a root of its own,
killed at one of the rescale's points (rescale_round.py); it counts as a kill. Every restart
recovers and compares with the model; every 50 kills and at the end `verify` reads every file
of both roots. Then come the chained rounds (`--chain-rounds`, by default one per 100 kills):
a Spark query of three stateful operators killed at a point of a chained batch and run again
(chain_round.py). The first failure stops the soak and leaves its directory for inspection.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyspark_dstl.cli import main as backend_cli
from tests.reliability.crash import CrashHarness
from tests.reliability.rescale_round import RescaleRounds
from tests.support import FaultProxy, MotoServer, S3Env, make_s3_env
from tests.support.backend import file_env, s3_env

VERIFY_EVERY = 50
WRITERS_EVERY = 10
RESCALE_ROUND = 2  # of every WRITERS_EVERY rounds


def s3_tool_args(s3: S3Env) -> list[str]:
    """What the command-line tool needs to reach the S3 server."""
    storage = s3.options.storage
    return ["--s3-endpoint", s3.endpoint_url, "--s3-region", str(storage.s3_region),
            "--conf", f"spark.dstl.changelog.s3.accessKeyId={storage.s3_access_key_id}",
            "--conf", f"spark.dstl.changelog.s3.secretAccessKey={storage.s3_secret_access_key}",
            "--conf", "spark.dstl.changelog.s3.addressingStyle=path"]


def verify_root(url: str, s3: S3Env | None = None) -> list[str]:
    """Problems `python -m pyspark_dstl verify` reports for the root (in-process)."""
    argv = ["verify", url, "--json"]
    if s3 is not None:
        argv += s3_tool_args(s3)
    out = io.StringIO()
    code = backend_cli(argv, out=out)
    problems: list[str] = json.loads(out.getvalue())["problems"] if out.getvalue() else []
    if code not in (0, 1):
        problems.append(f"verify could not run (exit status {code})")
    return problems


def leaked_temp_files(root: Path) -> int:
    """Temp files of uploads a kill interrupted (LocalStorage's '.tmp-' prefix)."""
    return sum(1 for _ in root.rglob(".tmp-*")) if root.exists() else 0


def one_kill(harness: CrashHarness, number: int, rescales: RescaleRounds | None = None,
             ) -> None:
    """Rotate the kinds of death; S3 roots also die with requests held at the proxy; every
    tenth round a second writer, every tenth a zombie, every tenth a killed rescale."""
    if rescales is not None and number % WRITERS_EVERY == RESCALE_ROUND:
        rescales.round()
        return
    if number % WRITERS_EVERY == WRITERS_EVERY - 1:
        harness.second_writer()
        return
    if number % WRITERS_EVERY == WRITERS_EVERY // 2 - 1:
        harness.zombie()
        return
    kinds: list[Callable[[], None]] = [harness.random_kill, harness.point_kill]
    if harness.s3 is not None:
        kinds.append(harness.wire_kill)
    kinds[number % len(kinds)]()


def rescale_rounds(harness: CrashHarness, s3: S3Env | None,
                   name: str = "rescale") -> RescaleRounds:
    """Rescale rounds on a root `name` next to the harness's (same storage)."""
    workdir = harness.workdir / name
    workdir.mkdir(parents=True, exist_ok=True)
    if s3 is None:
        env = file_env(workdir)
        return RescaleRounds(env, [], workdir, harness.rng, harness.stats)
    env = s3_env(s3, workdir)
    env.url = s3.url.rstrip("/") + f"-{name}"
    return RescaleRounds(env, s3_tool_args(s3), workdir, harness.rng, harness.stats)


def soak(harness: CrashHarness, kills: int, s3: S3Env | None = None,
         progress: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.monotonic()
    number = 0
    verify_runs = 0
    rescales = rescale_rounds(harness, s3)
    while harness.stats.kills < kills:
        one_kill(harness, number, rescales)
        number += 1
        if number % VERIFY_EVERY == 0:
            problems = verify_root(harness.url, s3)
            verify_runs += 1
            if problems:
                raise AssertionError(f"verify after {harness.stats.kills} kills: {problems}")
            progress(f"{harness.url}: {harness.stats.kills} kills, "
                     f"{time.monotonic() - started:.0f} s, verify clean")
    harness.verify_final()
    problems = verify_root(harness.url, s3) + verify_root(rescales.env.url, s3)
    rescales.env.close()
    if problems:
        raise AssertionError(f"final verify: {problems}")
    result = harness.stats.as_dict()
    result["rescale_rounds"] = rescales.rounds
    result["verify_runs"] = verify_runs + 1
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def chain_soak(rounds: int, seed: int, workdir: Path) -> dict[str, Any]:
    """`rounds` chained rounds, each at a kill point of a chained batch drawn at random."""
    from tests.reliability.chain_round import ChainRounds

    started = time.monotonic()
    chain = ChainRounds(workdir, random.Random(seed))
    for _ in range(rounds):
        chain.round()
    return {"rounds": chain.rounds, "point_kills": dict(chain.kills),
            "seconds": round(time.monotonic() - started, 1)}


def run(kills: int, seed: int, workdir: Path, storages: Sequence[str],
        chain_rounds: int = 0) -> dict[str, Any]:
    results: dict[str, Any] = {}
    share = max(1, kills // len(storages))
    if not kills:  # chained rounds only
        storages = ()
    if "file" in storages:
        root = workdir / "file"
        root.mkdir(parents=True, exist_ok=True)
        harness = CrashHarness((root / "ckpt").as_uri(), root, seed, random.Random(seed))
        results["file"] = soak(harness, share)
        results["file"]["leaked_temp_files"] = leaked_temp_files(root / "ckpt")
    if "s3" in storages:
        moto = MotoServer().start()
        proxy = FaultProxy(moto.endpoint_url).start()
        try:
            env = make_s3_env(moto, proxy)
            root = workdir / "s3"
            root.mkdir(parents=True, exist_ok=True)
            harness = CrashHarness(env.url, root, seed + 1, random.Random(seed + 1), s3=env)
            results["s3"] = soak(harness, share, env)
        finally:
            proxy.stop()
            moto.stop()
    if chain_rounds:
        results["chain"] = chain_soak(chain_rounds, seed + 2, workdir)
    return results


def format_table(results: dict[str, Any]) -> str:
    rows = ["storage  kills  random  kill-points  on-the-wire  recoveries  batches  "
            "refused  fenced  verify",
            "-------  -----  ------  -----------  -----------  ----------  -------  "
            "-------  ------  ------"]
    for storage, r in results.items():
        if storage == "chain":
            continue
        rows.append(f"{storage:<7}  {r['kills']:>5}  {r['random_kills']:>6}  "
                    f"{sum(r['point_kills'].values()):>11}  {sum(r['wire_kills'].values()):>11}  "
                    f"{r['recoveries_verified']:>10}  {r['batches_committed']:>7}  "
                    f"{r['second_writers_refused']:>7}  {r['zombies_fenced']:>6}  "
                    f"{r['verify_runs']:>3} ok")
    if "chain" in results:
        chain = results["chain"]
        points = ", ".join(f"{point} {count}" for point, count in
                           sorted(chain["point_kills"].items()))
        rows.append(f"chained rounds (Spark, three stateful operators): {chain['rounds']} "
                    f"killed and run again, every batch exact ({points})")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak")
    parser.add_argument("--kills", type=int, default=500, help="total SIGKILLs (split over "
                        "the storages)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--storage", default="file,s3", help="file, s3 or file,s3")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where roots and logs go (default: a new temporary directory)")
    parser.add_argument("--chain-rounds", type=int, default=None,
                        help="chained rounds (a Spark query of three stateful operators, "
                        "about two minutes each; default: one per 100 kills)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dstl-soak-"))
    storages = [s.strip() for s in args.storage.split(",") if s.strip()]
    print(f"soak: {args.kills} kills, seed {args.seed}, storages {storages}, in {workdir}",
          flush=True)
    chain_rounds = args.chain_rounds if args.chain_rounds is not None else args.kills // 100
    results = run(args.kills, args.seed, workdir, storages, chain_rounds)
    print(json.dumps(results, indent=1))
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
