"""A run holding a checkpoint root in its own process, steered line by line: the fencing
tests' other driver.

    python -m tests.reliability.holder <url> --lease 1s

It takes the root (printing {"event": "holding", "run_id", "epoch"} or, when refused,
{"event": "refused"} and exit status 5), renews its lease on its own, and obeys stdin:
"commit N" writes an empty commit log entry for batch N ({"event": "committed"} or
{"event": "fenced"}), "cleanup" runs a cleanup keeping one batch, "exit" lets go of the root.
A test can SIGSTOP it to make a zombie of it, or SIGKILL it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError, CheckpointHeldError, FencedError
from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.core.units import parse_duration

EXIT_REFUSED = 5


def say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.holder")
    parser.add_argument("url")
    parser.add_argument("--lease", default="1s")
    args = parser.parse_args(argv)
    options = FencingSettings(lease_duration=parse_duration(args.lease, "--lease"))
    with ChangelogService(args.url, ChangelogSettings(persist_delay=0.0)) as storage:
        try:
            lease = acquire(storage, options)
        except CheckpointHeldError as exc:
            say({"event": "refused", "error": str(exc)})
            return EXIT_REFUSED
        say({"event": "holding", "run_id": lease.run_id, "epoch": lease.epoch})
        log = CommitLog(storage, lease=lease)
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            try:
                if command == "commit":
                    batch = int(argument)
                    path = log.write(batch, CommitEntry(batch, {}))
                    say({"event": "committed", "batch": batch, "path": path})
                elif command == "cleanup":
                    report = cleanup_checkpoint(storage, 1, dry_run=False, lease=lease)
                    say({"event": "cleaned", "deleted": report.files})
                elif command == "exit":
                    break
            except FencedError as exc:
                say({"event": "fenced", "error": str(exc)})
            except BackendError as exc:
                say({"event": "error", "type": type(exc).__name__, "error": str(exc)})
        lease.release("told to exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
