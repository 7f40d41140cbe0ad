"""Named kill points for crash tests: SIGKILL this process the n-th time a point is reached.

The crash tests need to die at exact moments (between an upload and the commit that names
it, halfway through a cleanup), not only at random ones. The library calls `kill_point(name)`
at those moments; with `DSTL_KILL_POINT=name:n` in the environment the n-th call of that name
kills the process with SIGKILL, which no handler, `finally` or atexit hook can soften.
The variable is read once, at import: without it a call is one global lookup and a return.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from pyspark_dstl.core.errors import DstlError

ENV_VAR = "DSTL_KILL_POINT"

POINTS = (
    "changelog_persist_before",  # a commit is about to upload its changelog
    "changelog_persist_after",  # the changelog is durable, the commit not yet reported
    "stage_done",  # one operator's stage of a batch committed its stores; the stages of the
    # operators chained after it, the sink and the commit log entry are still to come
    "commit_log_before",  # every store committed, the commit log entry not yet written
    "commit_log_after",  # the commit log entry is durable, the writer not yet told
    "cleanup_delete",  # cleanup is about to delete one store's batch of files
    "schema_record_after",  # a new state schema record is durable, no batch committed on it
    "rescale_store_committed",  # a rescale committed one new store, maybe not all of them
    "rescale_stores_done",  # a rescale's new stores are durable, no commit entry names them
    "rescale_ranges_clipped",  # a range rescale clipped a copy of an old store, not committed
    "rescale_ranges_copied",  # a range rescale filled a new store, its snapshot not started
    "rescale_ranges_committed",  # a range rescale committed one new store, maybe not all
    "rescale_ranges_done",  # a range rescale's new stores are durable, no commit entry names them
    "move_in_place_marked",  # an in-place move: Spark's offset log holds the marker, nothing else
    "move_in_place_recorded",  # the move record (started) is durable, no state imported yet
    "move_in_place_committed",  # the imported state is committed, no engine checkpoint yet
    "move_in_place_engine_copied",  # Spark's logs are in the engine checkpoint, no done record
    "export_state_marked",  # an export: the location is marked and recorded, no Spark files yet
    "export_state_staged",  # Spark's operator wrote the exported state, not assembled yet
    "export_state_placed",  # the Spark checkpoint is in place, the move record not done yet
)


class KillPointError(DstlError, ValueError):
    """DSTL_KILL_POINT does not name a known point and a positive count."""


def parse_spec(raw: str | None) -> tuple[str, int] | None:
    """("name", n) from "name:n" (n defaults to 1); None when unset or blank."""
    if raw is None or not raw.strip():
        return None
    name, sep, count = raw.strip().partition(":")
    if name not in POINTS:
        raise KillPointError(f"{ENV_VAR}={raw!r}: unknown kill point {name!r} "
                             f"(known: {', '.join(POINTS)})")
    if not sep:
        return name, 1
    if not count.isdigit() or int(count) < 1:
        raise KillPointError(f"{ENV_VAR}={raw!r}: the count after ':' must be a positive "
                             f"integer")
    return name, int(count)


_SPEC = parse_spec(os.environ.get(ENV_VAR))
_lock = threading.Lock()
_reached = 0


def kill_point(name: str) -> None:
    """Die here (SIGKILL) when DSTL_KILL_POINT names this point and its count is reached."""
    if _SPEC is None or name != _SPEC[0]:
        return
    global _reached
    with _lock:
        _reached += 1
        fire = _reached == _SPEC[1]
    if fire:
        sys.stderr.write(f"{ENV_VAR}: killed at {name} #{_SPEC[1]}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
