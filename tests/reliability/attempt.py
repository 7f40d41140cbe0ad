"""One task attempt in its own process, steered line by line: the concurrency tests' executor.

    python -m tests.reliability.attempt <url> --name A --batch 3 --seed 41 --local-dir DIR

It loads its partition's store at the newest commit log entry (what the driver would hand the
task), writes the model's changes of `--batch` plus the key ("aux", b"attempt") = its name, so
state merged from two attempts would show, and prints {"event": "loaded"} with its unique id.
Then it obeys stdin: "commit" (or "commit-snapshot", which also snapshots) commits and prints
the StoreCommit; "write N" puts N more keys of 100 bytes (with `--early`, a write cache of
10 keys and a pre-emptive threshold of 2 kB make them upload before any commit); "abort"
aborts the transaction; "exit" closes everything. Errors are printed as {"event": "error"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from tests.reliability.model import WorkloadSpec, batch_changes
from tests.reliability.workload import LIBRARY_ERRORS

ATTEMPT_KEY = ("aux", b"attempt")


def say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def load(backend: StateBackend, url: str, spec: WorkloadSpec, partition: int) -> StateStore:
    provider = backend.provider(url, spec.operator, partition)
    latest = backend.commit_log(url).latest()
    if latest is None:
        return provider.get_store(0)
    info = latest[1].operators[spec.operator].stores[partition]
    return provider.get_store(info.version, info)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.attempt")
    parser.add_argument("url")
    parser.add_argument("--name", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--local-dir", required=True)
    parser.add_argument("--lock-timeout", type=float, default=30.0)
    parser.add_argument("--early", action="store_true",
                        help="upload large transactions before their commit")
    args = parser.parse_args(argv)
    spec = WorkloadSpec(seed=args.seed, partitions=1)
    changelog = ChangelogSettings(persist_delay=0.0,
                                 preemptive_persist_threshold=2000 if args.early else 5 << 20)
    options = BackendSettings(local_dir=args.local_dir, lock_timeout=args.lock_timeout,
                             changelog=changelog,
                             tx_cache_max_entries=10 if args.early else 100_000)
    backend = StateBackend(options)
    try:
        store = load(backend, args.url, spec, args.partition)
        for (cf, key), value in batch_changes(spec, args.batch, args.partition).items():
            if value is None:
                store.remove(key, cf)
            else:
                store.put(key, value, cf)
        store.put(ATTEMPT_KEY[1], args.name.encode(), ATTEMPT_KEY[0])
        say({"event": "loaded", "version": store.version, "unique_id": store.unique_id})
        written = 0
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command in ("commit", "commit-snapshot"):
                info = store.commit(materialize=command == "commit-snapshot")
                say({"event": "committed", "info": info.to_dict()})
            elif command == "write":
                for _ in range(int(argument)):
                    store.put(b"extra%06d" % written, b"v" * 100, ATTEMPT_KEY[0])
                    written += 1
                say({"event": "written", "keys": written})
            elif command == "abort":
                store.abort()
                say({"event": "aborted"})
            elif command == "exit":
                break
    except LIBRARY_ERRORS as exc:
        say({"event": "error", "type": type(exc).__name__, "message": str(exc)})
        return 1
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
